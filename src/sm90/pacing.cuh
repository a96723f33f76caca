// Pacing of one-wave multi-token prediction grids (docs/design.md, "Pacing"): every CTA of such
// a grid streams its own union, and the call ends with the CTA that has the most blocks left,
// while the SMs that finished early leave the DRAM to fewer and fewer streams. So the CTAs
// share how much they have left to issue, and a CTA whose remainder is below the running CTAs'
// mean (by more than a slack) holds its next load for a moment, which leaves its share of the
// DRAM to the CTAs that have more to do.
//
// Pacing moves time, never data: what a CTA loads and computes, and in which order, is the same
// with it or without it, so results stay bitwise equal (tests/gpu/test_gpu_decode.py). That is
// why its shared state can be loose: three counters in device memory that every CTA of a paced
// call adds to and takes back from, so a completed call leaves them as it found them (zero at
// module load). Two paced calls running at once on two streams see each other's counts, and a
// CTA may then hold when it should not; every hold is bounded, so that costs time, not
// progress.
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

// One per translation unit, i.e. per instantiated kernel: a call uses its own kernel's.
static __device__ PacingCounters g_pacing;

// A CTA holds only from this step of its slice on, when every CTA of the wave has entered and
// published (they enter over about 4.5 us and plan in about 6; a block takes about 2 us).
constexpr int kPacingFirstStep = 4;
// The pacer's poll period and the producer's bound on one hold (64 waits of about 0.1 us).
constexpr unsigned kPacingPollNs = 400;
constexpr unsigned kPacingHoldPollNs = 100;
constexpr int kPacingMaxHoldPolls = 64;
// p.boost_slack's zero: values 1-17 are slacks of -2 to +2 blocks in quarters.
constexpr int kBoostSlackZero = 9;

__device__ __forceinline__ uint32_t load_relaxed(const uint32_t* counter) {
  uint32_t value;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(counter) : "memory");
  return value;
}

// Producer: joins the grid's counts before its first load, counts each step's loads, leaves
// after its last.
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

// Producer, before a step's first load: waits while the pacer says hold, at most a bounded time.
__device__ __forceinline__ void pacing_wait_turn(const SmemHeader& header) {
  const volatile int32_t* hold = &header.pacing_hold;
  for (int polls = 0; *hold != 0 && polls < kPacingMaxHoldPolls; ++polls) {
    __nanosleep(kPacingHoldPollNs);
  }
}

// The pacer (one thread of the producer warpgroup, beside the producer): until the producer has
// issued its last step, compares this CTA's steps left with the running CTAs' mean and tells
// the producer whether to hold. Hold when (mine + slack) x active < everyone's left, i.e. mine
// is more than `slack` blocks below the mean.
// With p.boost_slack, a CTA more than (p.boost_slack - kBoostSlackZero) / 4 blocks above the
// mean is told to boost: the producer then keeps both stages in flight (no throttle) until it
// is back near the mean.
__device__ inline void pace(const PrefillParams& p, SmemHeader& header, int steps) {
  const uint32_t slack = static_cast<uint32_t>(p.pacing_slack - 1);
  // In quarter blocks, either side of the mean.
  const int64_t boost_slack = static_cast<int64_t>(p.boost_slack) - kBoostSlackZero;
  const volatile int32_t* progress = &header.pacing_progress;
  volatile int32_t* hold = &header.pacing_hold;
  volatile int32_t* boost = &header.pacing_boost;
  for (int issued_here = *progress; issued_here < steps; issued_here = *progress) {
    const uint32_t published = load_relaxed(&g_pacing.published);
    const uint32_t issued = load_relaxed(&g_pacing.issued);
    const uint32_t active = load_relaxed(&g_pacing.active);
    const uint32_t left_everywhere = published - issued;  // modular: the counters only wrap
    const uint32_t left_here = static_cast<uint32_t>(steps - issued_here);
    *hold = p.pacing_slack > 0 && active > 1 &&
            static_cast<uint64_t>(left_here + slack) * active <
                static_cast<uint64_t>(left_everywhere);
    *boost = p.boost_slack > 0 && active > 1 &&
             4 * static_cast<int64_t>(left_here) * active >
                 4 * static_cast<int64_t>(left_everywhere) + boost_slack * active;
    __nanosleep(kPacingPollNs);
  }
}

}  // namespace flashmsa::sm90
