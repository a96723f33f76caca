// The CPU backend's worker pool: items [0, items) shared out dynamically over at most `threads`
// threads (the caller's among them), each with its own state from make_state(). No result may
// depend on which thread computes an item. The first exception stops the other workers early
// and is rethrown on the calling thread once all have joined.
#pragma once

#include <stdint.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace flashmsa {

// At most the machine's hardware threads, at least one.
inline int64_t hardware_threads() {
  return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
}

template <typename MakeState, typename Work>
void parallel_for(int64_t items, int64_t threads, MakeState make_state, Work work) {
  if (items <= 0) return;
  std::atomic<int64_t> next_item{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&] {
    try {
      auto state = make_state();
      for (int64_t item = next_item++; item < items; item = next_item++) work(item, state);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next_item = items;
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < std::min(threads, items); ++t) {
    // A thread that cannot be started only means fewer workers.
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      break;
    }
  }
  worker();
  for (std::thread& thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace flashmsa
