// Rules of the sm90 launch plan (launch_plan.cpp) that are pure functions of shapes: which
// calls the one-token kernel takes, how many splits its short slices get and how many a short
// prefill call's tiles get, apart from the CUDA code so that the CPU test suite checks them
// (tests/cpp/test_split_rules.cpp).
#pragma once

#include <stdint.h>

#include <algorithm>

namespace flashmsa::sm90 {

// The one-token decode kernel runs one CTA per (query row, KV head[, split]), each row its own
// tile; it takes calls of kernel-shaped heads (`one_token_shape`: at most 16 query heads per KV
// head, topk <= 32) that are decode batches (one row per request), and calls of at most 8 rows
// per request (multi-token prediction) whose rows x KV heads fit one CTA per SM. There its short
// start (about 3 us to the first K, against about 7 for the two-consumer kernel's sorted plan of
// the request's union and its merge kernel) outweighs reading a block once per row that
// selects it rather than once per request; past one CTA per SM two rows share an SM's intake
// and the union's sharing wins. Measured (H200, 8 rows a request, rotating inputs):
// batch 1 13.2-13.8 us against 24.6-26.2 at KV 32000-200000, batch 4
// 12.1-34.2 against 20.1-44.5 at KV 1000-200000 (128 CTAs); batch 5 37.9 against 28.4 at KV
// 4000 (160 CTAs), batch 8 49.5 against 33.3. `mode` is flashmsa_tuning::decode_kernel: 0 never, 1
// this rule, 2 every call of at most 8 rows per request (a measurement).
inline bool takes_one_token_kernel(bool one_token_shape, int64_t total_q, int64_t batch_size,
                                   int64_t num_kv_heads, int64_t multiprocessors, int32_t mode) {
  if (!one_token_shape || mode == 0) return false;
  if (total_q == batch_size) return true;
  const bool few_rows_per_request = total_q <= 8 * batch_size;
  if (mode == 2) return few_rows_per_request;
  return few_rows_per_request && total_q * num_kv_heads <= multiprocessors;
}

// One-token splits of fewer than 8 blocks run faster with some SMs left free: at most 17/20 of
// the SMs' worth of CTAs (112 of 132), then the fewest splits whose longest slice is as short
// (more CTAs of the same slice length only add starts and pushes). `units`: the grid's likely
// (tile, head) units; `max_union`: the most blocks a tile can read (topk for one row).
// Measured (H200, topk 16, rotating inputs): batch 4 6 splits 9.0 us (8:
// 10.0-10.5), batch 5 4 splits 9.6-9.8 (6: 10.9-11.0), batch 6 4 splits 10.4-10.6 (5:
// 11.9-12.2), batch 8 3 splits 13.8 (4: 14.1-14.4), batch 10 2 splits 15.1 (3: 15.4-15.7),
// batch 11 2 splits 15.7 (3: 20.5); batch 7's 4 (112 CTAs) and batch 16's 2 (8 blocks) were
// best already.
inline int32_t short_one_token_splits(int64_t units, int64_t multiprocessors, int64_t max_union,
                                      int32_t num_splits) {
  if (max_union <= 0) return num_splits;
  // The longest of `parts` near-equal slices of max_union blocks; also, read the other way, the
  // fewest slices that are each at most `parts` blocks long.
  auto longest_slice = [&](int64_t parts) { return (max_union + parts - 1) / parts; };
  int64_t splits = std::max<int32_t>(1, num_splits);
  const int64_t free_sm_ctas = multiprocessors * 17 / 20;
  if (longest_slice(splits) < 8 && units > 0 && units * splits > free_sm_ctas) {
    splits = std::max<int64_t>(1, free_sm_ctas / units);
  }
  return static_cast<int32_t>(longest_slice(longest_slice(splits)));
}

// Prefill calls of one to two waves of (tile, head) units: requests longer than a tile, whose
// tiles each walk a long union (short production chunks: 171-347 tokens of one request make
// 88-176 units on 132 SMs). One split runs them in one wave with a third of the SMs idle, or in
// two waves whose second is mostly empty: take the count of 1 to 4 splits whose waves per
// split, ceil(splits x units / slots) / splits, are fewest (the fewest splits on a tie), and 1
// split outside that range (`units` at most slots / 2 get the plan's general rule; more than
// two waves balance themselves). Measured (H200, bf16, one request, indexer; 1 split, then the
// rule's): 171 tokens on 55K keys 0.143 -> 0.123 ms (3 splits), 338 on 75K 0.272 -> 0.225 (3),
// 347 on 132K 0.279 -> 0.228 (3); at 1404 tokens (704 units) 3 splits were slower (0.826 against
// 0.799). Short unions gain nothing (182 tokens on 18K keys: 0.111 ms, 3 splits 0.120, 4
// 0.109), so the rule also asks that a request may hold kShortPrefillMinBlocks blocks
// (`request_blocks`: the page table's width, or the flat cache's blocks; the host knows no more).
constexpr int64_t kShortPrefillMinBlocks = 256;

inline int32_t short_prefill_splits(int64_t units, int64_t slots, int64_t request_blocks,
                                    int32_t most_splits) {
  if (units <= 0 || units * 2 <= slots || units > 2 * slots) return 1;
  if (request_blocks < kShortPrefillMinBlocks) return 1;
  int32_t best = 1;
  double best_waves = 0.0;
  for (int32_t splits = 1; splits <= std::min(4, most_splits); ++splits) {
    const int64_t waves = (splits * units + slots - 1) / slots;
    const double waves_per_split = static_cast<double>(waves) / splits;
    if (splits == 1 || waves_per_split < best_waves) {
      best = splits;
      best_waves = waves_per_split;
    }
  }
  return best;
}

}  // namespace flashmsa::sm90
