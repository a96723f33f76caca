// Pacing of one-wave multi-token prediction grids (docs/design.md, "Pacing"). Every CTA of such
// a grid streams its own union under the throttle (producer.cuh: 64 KiB in flight, so that the
// SMs' shares of the DRAM stay fair), and the call ends with the CTA that had the most blocks
// to load: the unions differ by about 20% (89-108 blocks at batch 32), and a throttled CTA
// cannot go faster than its 64 KiB in flight allow, however many SMs have finished. So the CTAs
// share how many blocks they have left to issue, and a CTA with more left than the running
// CTAs' mean is exempt from the throttle (both stages in flight) until it is back at the mean.
//
// Pacing moves time, never data: what a CTA loads and computes, and in which order, is the same
// with it or without it, so results stay bitwise equal (tests/gpu/test_gpu_decode.py). That is
// why its shared state can be loose: three counters in device memory that every CTA of a paced
// call adds to and takes back from, so that a completed call leaves them as it found them (zero
// at module load). Two paced calls running at once on two streams see each other's counts, and
// a CTA may then load unthrottled when it should not: time, never a wait or a wrong result.
#pragma once

#include <stdint.h>

#include "sm90/kernel_traits.h"
#include "sm90/params.h"

namespace flashmsa::sm90 {

struct PacingCounters {
  uint32_t published;  // blocks the running CTAs have to issue, in all
  uint32_t issued;     // of those, issued
  uint32_t active;     // CTAs still issuing
};

// One per translation unit (prefill_bf16.cu, prefill_fp16.cu), shared by that file's kernels;
// calls on one stream run one after the other, each leaving the counters at zero.
static __device__ PacingCounters g_pacing;

// The pacer's poll period. The producer issues a block about every 2 us at batch 32.
constexpr unsigned kPacingPollNs = 400;

__device__ __forceinline__ uint32_t load_relaxed(const uint32_t* counter) {
  uint32_t value;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(counter) : "memory");
  return value;
}

// Producer: joins the grid's counts before its first load, counts each step (for the grid and
// for its pacer), leaves after its last.
__device__ __forceinline__ void pacing_join(int steps) {
  atomicAdd(&g_pacing.published, static_cast<uint32_t>(steps));
  atomicAdd(&g_pacing.active, 1u);
}

__device__ __forceinline__ void pacing_count_step(SmemHeader& header, int steps_issued) {
  atomicAdd(&g_pacing.issued, 1u);
  *reinterpret_cast<volatile int32_t*>(&header.pacing_progress) = steps_issued;
}

__device__ __forceinline__ void pacing_leave() { atomicAdd(&g_pacing.active, 0xffffffffu); }

// Producer: whether the pacer says this CTA is behind (it then skips the throttle's waits).
__device__ __forceinline__ bool pacing_boosted(const SmemHeader& header) {
  return *reinterpret_cast<const volatile int32_t*>(&header.pacing_boost) != 0;
}

// The pacer (one thread of the producer warpgroup, beside the producer): until the producer has
// issued its last step, compares this CTA's steps left with the running CTAs' mean and boosts
// the producer while it is more than (p.pacing_slack - kPacingSlackZero) / 4 blocks above it.
// Measured best at the mean itself (slacks of -0.5 to -2 blocks slower, +0.5 the same).
__device__ inline void pace(const AttentionParams& p, SmemHeader& header, int steps) {
  const int64_t slack_quarters = static_cast<int64_t>(p.pacing_slack) - kPacingSlackZero;
  const volatile int32_t* progress = &header.pacing_progress;
  volatile int32_t* boost = &header.pacing_boost;
  for (int issued_here = *progress; issued_here < steps; issued_here = *progress) {
    const uint32_t published = load_relaxed(&g_pacing.published);
    const uint32_t issued = load_relaxed(&g_pacing.issued);
    const uint32_t active = load_relaxed(&g_pacing.active);
    const uint32_t left_everywhere = published - issued;  // modular: the counters only wrap
    const int64_t left_here = steps - issued_here;
    *boost = active > 1 && 4 * left_here * active >
                               4 * static_cast<int64_t>(left_everywhere) + slack_quarters * active;
    __nanosleep(kPacingPollNs);
  }
}

}  // namespace flashmsa::sm90
