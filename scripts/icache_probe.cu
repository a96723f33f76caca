// Diagnostic, not part of the library: is a kernel's code cold at every launch, and does one
// warp running a stretch of code warm it for another warp of the SM? The one-token decode
// kernel's start is a chain of steps of a few instructions that each take 0.1-0.2 us after its
// loads have landed (docs/performance.md, twenty-second session), which looks like instruction
// fetch; if another warp's run warms the SM's instruction cache, the idle consumer warps could
// run the planner's code ahead of it.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc -o build-probe/icache_probe scripts/icache_probe.cu
//   build-probe/icache_probe
//
// Each CTA's warps take turns (warp 0, then 1, then 0 again, one at a time) through one
// stretch of 700 dependent rotate-and-add steps (about 30 KiB of code), timing it with the SM
// clock. Three launches in a row; one CTA per SM. A stretch that runs at its steps' own latency
// is warm.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_common.cuh"

constexpr int kTurns = 3;        // warp 0, warp 1, warp 0
constexpr int kSteps = 700;  // about 3 instructions each: some 30 KiB of code

// cycles: [cta][turn]
__global__ void take_turns(long long* cycles, uint32_t* sink) {
  const int warp = threadIdx.x / 32;
  uint32_t x = threadIdx.x;
  for (int turn = 0; turn < kTurns; ++turn) {
    const int runner = turn == 1 ? 1 : 0;
    if (warp == runner) {
      const long long start = clock64();
#pragma unroll
      for (int i = 0; i < kSteps; ++i) {
        // A rotation by a data-dependent amount: nothing the compiler can fold across steps.
        x = __funnelshift_l(x, x, (x & 7) + 1) + static_cast<uint32_t>(i);
      }
      const long long end = clock64();
      if (threadIdx.x % 32 == 0) cycles[blockIdx.x * kTurns + turn] = end - start;
    }
    __syncthreads();
  }
  if (x == 0x9e3779b9u) sink[0] = x;  // keeps the adds
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int ctas = prop.multiProcessorCount;
  long long* cycles = nullptr;
  uint32_t* sink = nullptr;
  CHECK(cudaMalloc(&cycles, ctas * kTurns * sizeof(long long)));
  CHECK(cudaMalloc(&sink, sizeof(uint32_t)));
  // Shared memory past half an SM's: one CTA per SM.
  const int smem = static_cast<int>(prop.sharedMemPerMultiprocessor / 2 + 1024);
  CHECK(cudaFuncSetAttribute(take_turns, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::printf("%s: %d CTAs, %d dependent steps per stretch (median / max cycles)\n", prop.name,
              ctas, kSteps);
  std::vector<long long> host(ctas * kTurns);
  for (int launch = 0; launch < 3; ++launch) {
    take_turns<<<ctas, 64, smem>>>(cycles, sink);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(host.data(), cycles, host.size() * sizeof(long long),
                     cudaMemcpyDeviceToHost));
    std::printf("launch %d:", launch);
    const char* names[kTurns] = {"warp 0 first", "then warp 1", "then warp 0 again"};
    for (int turn = 0; turn < kTurns; ++turn) {
      std::vector<long long> t;
      for (int c = 0; c < ctas; ++c) t.push_back(host[c * kTurns + turn]);
      std::sort(t.begin(), t.end());
      std::printf("  %s %lld / %lld", names[turn], t[t.size() / 2], t.back());
    }
    std::printf("\n");
  }
  CHECK(cudaFree(cycles));
  CHECK(cudaFree(sink));
  return 0;
}
