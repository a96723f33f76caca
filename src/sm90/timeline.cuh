// Device timeline for diagnosis, compiled in only with -DFLASHMSA_TIMELINE=ON (CMake option; the
// release kernels contain none of it). One thread of every CTA (thread 128, a consumer thread,
// which also takes part in block-wide planning; planning and the producer's marks are thread 0's)
// stores the SM's cycle counter at phase boundaries, and after its epilogue records its CTA's
// row in a ring of the last kRingCalls calls: each mark in absolute %globaltimer ns (0 for a
// phase the CTA did not reach), its SM, its SM clock (MHz), the end of its work and its exit
// (the record itself takes about 1.6 us, so a timeline build's calls are that much longer than
// a release build's; the exit is what the next call's hand-over is measured from). The host
// reads the ring (flashmsa_timeline_ring_*, exported by decode_bf16.cu and prefill_bf16.cu;
// each translation unit has its own, there being no relocatable device code), and
// scripts/timeline.py summarises it, for eager calls or for consecutive calls in a CUDA graph.
// The cycles become ns through the CTA's own ratio of %globaltimer to cycles between entry and
// record: a mark is one clock read and one store, with no global-timer read in the phase it
// measures. No printf anywhere: a printf costs tens of microseconds at the CTA's exit, and a
// kernel that holds one launches more slowly, which a graph's consecutive calls would show.
#pragma once

#include <stdint.h>

#ifdef FLASHMSA_TIMELINE
#include <cuda_runtime.h>

#include "sm90/ptx.cuh"

namespace flashmsa::sm90 {

enum TimelineMark {
  kMarkEntry, kMarkWaited, kMarkLocated, kMarkEntriesRead, kMarkNegativesCut, kMarkCandidates,
  kMarkSorted, kMarkCompacted, kMarkPlanned, kMarkQueriesLoaded, kMarkFirstK, kMarkFirstV,
  kMarkLastK, kMarkLoopDone, kMarkFirstScores, kMarkFirstSoftmax, kMarkPublished,
  kMarkClusterJoined, kMarkReduced,
  // The end of a one-token tile, step by step (thread 128: an owner in split 0's CTA, a pusher
  // in the others), and the producer's first issue (thread 0).
  kMarkClusterReady, kMarkPushed, kMarkOwnersReady, kMarkLseCombined,
  kMarkFirstIssued,
  // The decode producer between its plan and its first issue (thread 0).
  kMarkProducerReleased, kMarkFirstKIssued,
  // Warp planning's speculative first block issued (or given up), before the plan's rules.
  kMarkSpeculated,
  // The one-token planner past the barrier on the consumers' copy of the page-table row.
  kMarkPageRowShared, kNumMarks
};

// CTAs past this many are not recorded (the timeline cases have at most 512).
constexpr int kTimelineCtas = 512;
// The marks' staging rows, by CTA index and by the launch's %gridid modulo kStagingGrids:
// with programmatic launch, the next call's CTA of the same index enters before this one has
// recorded its row, and a row per index alone would be cleared under it.
constexpr int kStagingGrids = 4;
__device__ uint64_t g_timeline[kStagingGrids][kTimelineCtas][kNumMarks];  // clock64 at marks
__device__ uint64_t g_timeline_entry_ns[kStagingGrids][kTimelineCtas];     // %globaltimer

// The ring: call c of CTA index i (counted per index since the host reset it) in slot
// c % kRingCalls. Every call launches each index once, and a call's CTAs record only after
// the previous call has completed (its grid wait), so a slot holds one call's CTAs.
constexpr int kRingCalls = 8;
// The marks, the SM, its clock (MHz), the end of the CTA's work and its exit (timeline_record).
constexpr int kRingFields = kNumMarks + 4;
__device__ uint32_t g_timeline_ring_calls[kTimelineCtas];
__device__ uint64_t g_timeline_ring[kRingCalls][kTimelineCtas][kRingFields];

__device__ __forceinline__ int timeline_staging() {
  uint64_t grid;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
  return static_cast<int>(grid % kStagingGrids);
}

__device__ __forceinline__ uint64_t timeline_cycles() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}

// The entry mark clears the CTA's row (an earlier call's values would pass for this one's); the
// marks by thread 0 come later (after the first block barrier, or after planning's loads).
__device__ __forceinline__ void timeline_mark(TimelineMark mark, int thread = 128) {
  if (threadIdx.x != thread || blockIdx.x >= kTimelineCtas) return;
  const int staging = timeline_staging();
  uint64_t* row = g_timeline[staging][blockIdx.x];
  if (mark == kMarkEntry) {
    for (int m = 0; m < kNumMarks; ++m) row[m] = 0;
    g_timeline_entry_ns[staging][blockIdx.x] = global_timer_ns();
  }
  row[mark] = timeline_cycles();
}

__device__ __forceinline__ void timeline_record() {
  if (threadIdx.x != 128 || blockIdx.x >= kTimelineCtas) return;
  const int staging = timeline_staging();
  const uint64_t* t = g_timeline[staging][blockIdx.x];
  const uint64_t entry = t[kMarkEntry], end = timeline_cycles();
  const uint64_t entry_ns = g_timeline_entry_ns[staging][blockIdx.x], end_ns = global_timer_ns();
  const double ns_per_cycle =
      end > entry ? static_cast<double>(end_ns - entry_ns) / static_cast<double>(end - entry) : 0.0;
  // Every mark into registers first: with the ring's stores between them, each load would wait
  // for the store before it (they might alias), one L2 round trip per mark, 3 us in all.
  uint64_t marks[kNumMarks];
#pragma unroll
  for (int m = 0; m < kNumMarks; ++m) marks[m] = t[m];
  const uint32_t call = atomicAdd(&g_timeline_ring_calls[blockIdx.x], 1u) % kRingCalls;
  uint64_t* row = g_timeline_ring[call][blockIdx.x];
#pragma unroll
  for (int m = 0; m < kNumMarks; ++m) {
    row[m] = m == kMarkEntry ? entry_ns
             : marks[m] == 0 || marks[m] < entry
                 ? 0
                 : entry_ns + static_cast<uint64_t>((marks[m] - entry) * ns_per_cycle);
  }
  row[kNumMarks] = sm_id();
  row[kNumMarks + 1] = ns_per_cycle > 0.0 ? static_cast<uint64_t>(1000.0 / ns_per_cycle) : 0;
  row[kNumMarks + 2] = end_ns;
  // The exit is read last, after the staging row's loads and the ring slot's atomic (two L2
  // round trips): the CTA's exit but for one store, which the hand-over between graph calls
  // (timeline.py --graph) is measured from.
  row[kNumMarks + 3] = global_timer_ns();
}

// Host, for one translation unit's ring: `ring` (kRingCalls x kTimelineCtas x kRingFields
// uint64) and `calls` (kTimelineCtas uint32), where not null, receive the ring; then, if
// `reset`, the call counters are zeroed. Static: each unit reads its own symbols.
static inline cudaError_t timeline_ring_control(void* ring, void* calls, int reset) {
  cudaError_t status = cudaSuccess;
  if (ring) status = cudaMemcpyFromSymbol(ring, g_timeline_ring, sizeof(g_timeline_ring));
  if (status == cudaSuccess && calls) {
    status = cudaMemcpyFromSymbol(calls, g_timeline_ring_calls, sizeof(g_timeline_ring_calls));
  }
  if (status == cudaSuccess && reset) {
    static const uint32_t zeros[kTimelineCtas] = {};
    status = cudaMemcpyToSymbol(g_timeline_ring_calls, zeros, sizeof(zeros));
  }
  return status;
}

}  // namespace flashmsa::sm90

// The exported reader of one translation unit's ring (timeline_ring_control), named
// flashmsa_timeline_ring_<unit>: a cudaError_t, 0 on success. Nothing in release builds.
#define FLASHMSA_EXPORT_TIMELINE_RING(unit)                                               \
  extern "C" __attribute__((visibility("default"))) int flashmsa_timeline_ring_##unit(    \
      void* ring, void* calls, int reset) {                                               \
    return static_cast<int>(::flashmsa::sm90::timeline_ring_control(ring, calls, reset)); \
  }

#define FLASHMSA_MARK(mark) ::flashmsa::sm90::timeline_mark(::flashmsa::sm90::mark)
#define FLASHMSA_MARK_BY(thread, mark) \
  ::flashmsa::sm90::timeline_mark(::flashmsa::sm90::mark, thread)
#define FLASHMSA_MARK_IF(condition, mark) \
  if (condition) ::flashmsa::sm90::timeline_mark(::flashmsa::sm90::mark)
#define FLASHMSA_MARK_IF_BY(condition, thread, mark) \
  if (condition) ::flashmsa::sm90::timeline_mark(::flashmsa::sm90::mark, thread)
#define FLASHMSA_TIMELINE_RECORD() ::flashmsa::sm90::timeline_record()

#else

#define FLASHMSA_MARK(mark) ((void)0)
#define FLASHMSA_MARK_BY(thread, mark) ((void)0)
#define FLASHMSA_MARK_IF(condition, mark) ((void)0)
#define FLASHMSA_MARK_IF_BY(condition, thread, mark) ((void)0)
#define FLASHMSA_TIMELINE_RECORD() ((void)0)
#define FLASHMSA_EXPORT_TIMELINE_RING(unit)

#endif
