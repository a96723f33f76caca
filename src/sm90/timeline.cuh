// Device timeline for diagnosis, compiled in only with -DFLASHMSA_TIMELINE=ON (CMake option; the
// release kernels contain none of it). One thread of every CTA (thread 128, a consumer thread,
// which also takes part in block-wide planning; planning and the producer's marks are thread 0's)
// stores the SM's cycle counter at phase boundaries into a device array, and after its epilogue
// prints its CTA's row: its SM, the SM clock over the CTA (MHz), the entry time in absolute ns
// (%globaltimer), then each phase in ns from
// entry, 0 for a phase the CTA did not reach (`TL cta ...` lines; scripts/timeline.py summarises
// them over the CTAs and lists the slowest). The cycles become ns through the CTA's own ratio of
// %globaltimer to cycles between entry and print: a mark is then one clock read and one store,
// with no global-timer read in the phase it measures. Stores, not printf, at the marks: a printf
// costs tens of microseconds and would be the timeline.
#pragma once

#include <stdint.h>

#ifdef FLASHMSA_TIMELINE
#include <cuda_runtime.h>

#include <cstdio>

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
  kMarkSpeculated, kNumMarks
};

// CTAs past this many are not recorded (the timeline cases have at most 512).
constexpr int kTimelineCtas = 2048;
__device__ uint64_t g_timeline[kTimelineCtas][kNumMarks];  // clock64 at each mark
__device__ uint64_t g_timeline_entry_ns[kTimelineCtas];     // %globaltimer at entry

// Ring mode (scripts/timeline.py --graph): instead of printing, each CTA stores its row into a
// ring of the last kRingCalls calls, every mark as absolute %globaltimer ns, so that the marks
// of consecutive calls in a CUDA graph line up on one clock. A printf would delay the CTA's
// exit by tens of microseconds, and with it the next call's start, which is what graph mode
// measures. Call c of CTA index i (counted per index since the ring was reset) lands in slot
// c % kRingCalls; every call launches each index once, so a slot holds one call's CTAs.
// Each translation unit has its own ring (no relocatable device code); decode_bf16.cu
// exports its own (flashmsa_timeline_ring_decode_bf16).
constexpr int kRingCalls = 8;
constexpr int kRingCtas = 512;
constexpr int kRingFields = kNumMarks + 2;  // the marks (0: not reached), the SM, the end
__device__ int g_timeline_ring_mode;
__device__ uint32_t g_timeline_ring_calls[kRingCtas];
__device__ uint64_t g_timeline_ring[kRingCalls][kRingCtas][kRingFields];

__device__ __forceinline__ int timeline_slot(int thread = 128) {
  if (threadIdx.x != thread) return -1;
  return blockIdx.x < kTimelineCtas ? static_cast<int>(blockIdx.x) : -1;
}

__device__ __forceinline__ uint64_t timeline_cycles() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}

// The entry mark clears the CTA's row (an earlier call's values would pass for this one's); the
// marks by thread 0 come later (after the first block barrier, or after planning's loads).
__device__ __forceinline__ void timeline_mark(TimelineMark mark, int thread = 128) {
  const int slot = timeline_slot(thread);
  if (slot < 0) return;
  if (mark == kMarkEntry) {
    for (int m = 0; m < kNumMarks; ++m) g_timeline[slot][m] = 0;
    g_timeline_entry_ns[slot] = global_timer_ns();
  }
  g_timeline[slot][mark] = timeline_cycles();
}

__device__ __forceinline__ void timeline_print() {
  const int slot = timeline_slot();
  if (slot < 0) return;
  const uint64_t* t = g_timeline[slot];
  const uint64_t entry = t[kMarkEntry], end = timeline_cycles();
  const uint64_t entry_ns = g_timeline_entry_ns[slot], end_ns = global_timer_ns();
  const double ns_per_cycle =
      end > entry ? static_cast<double>(end_ns - entry_ns) / static_cast<double>(end - entry) : 0.0;
  auto since = [&](TimelineMark mark) {
    return t[mark] == 0 || t[mark] < entry
               ? 0ull
               : static_cast<unsigned long long>((t[mark] - entry) * ns_per_cycle);
  };
  if (g_timeline_ring_mode) {
    if (blockIdx.x >= kRingCtas) return;
    const uint32_t call = atomicAdd(&g_timeline_ring_calls[blockIdx.x], 1u) % kRingCalls;
    uint64_t* row = g_timeline_ring[call][blockIdx.x];
    for (int m = 0; m < kNumMarks; ++m) {
      const TimelineMark mark = static_cast<TimelineMark>(m);
      row[m] = mark == kMarkEntry ? entry_ns : (since(mark) == 0 ? 0 : entry_ns + since(mark));
    }
    row[kNumMarks] = sm_id();
    row[kNumMarks + 1] = end_ns;
    return;
  }
  printf("TL cta %d sm %u mhz %u entry_abs %llu waited %llu located %llu speculated %llu "
         "entries %llu negatives %llu "
         "candidates %llu deduplicated %llu compacted %llu planned %llu q %llu first_k %llu "
         "scores %llu softmax %llu first_v %llu last_k %llu loop %llu published %llu joined %llu "
         "reduced %llu cluster_ready %llu pushed %llu owners_ready %llu "
         "lse_combined %llu issued %llu released %llu k_issued %llu end %llu\n",
         blockIdx.x, sm_id(), ns_per_cycle > 0.0 ? static_cast<unsigned>(1000.0 / ns_per_cycle) : 0u,
         entry_ns, since(kMarkWaited), since(kMarkLocated), since(kMarkSpeculated),
         since(kMarkEntriesRead),
         since(kMarkNegativesCut), since(kMarkCandidates), since(kMarkSorted),
         since(kMarkCompacted), since(kMarkPlanned), since(kMarkQueriesLoaded),
         since(kMarkFirstK), since(kMarkFirstScores), since(kMarkFirstSoftmax),
         since(kMarkFirstV), since(kMarkLastK), since(kMarkLoopDone), since(kMarkPublished),
         since(kMarkClusterJoined), since(kMarkReduced),
         since(kMarkClusterReady), since(kMarkPushed), since(kMarkOwnersReady),
         since(kMarkLseCombined), since(kMarkFirstIssued), since(kMarkProducerReleased),
         since(kMarkFirstKIssued), end_ns - entry_ns);
}

// Host, for one translation unit's ring: `ring` (kRingCalls x kRingCtas x kRingFields uint64)
// and `calls` (kRingCtas uint32), where not null, receive the ring; then mode >= 0 sets ring
// mode (1) or printing (0) and zeroes the call counters. Static: each unit reads its own
// symbols.
static inline cudaError_t timeline_ring_control(int mode, void* ring, void* calls) {
  cudaError_t status = cudaSuccess;
  if (ring) status = cudaMemcpyFromSymbol(ring, g_timeline_ring, sizeof(g_timeline_ring));
  if (status == cudaSuccess && calls) {
    status = cudaMemcpyFromSymbol(calls, g_timeline_ring_calls, sizeof(g_timeline_ring_calls));
  }
  if (status == cudaSuccess && mode >= 0) {
    static const uint32_t zeros[kRingCtas] = {};
    status = cudaMemcpyToSymbol(g_timeline_ring_mode, &mode, sizeof(mode));
    if (status == cudaSuccess) {
      status = cudaMemcpyToSymbol(g_timeline_ring_calls, zeros, sizeof(zeros));
    }
  }
  return status;
}

}  // namespace flashmsa::sm90

#define FLASHMSA_MARK(mark) ::flashmsa::sm90::timeline_mark(::flashmsa::sm90::mark)
#define FLASHMSA_MARK_BY(thread, mark) \
  ::flashmsa::sm90::timeline_mark(::flashmsa::sm90::mark, thread)
#define FLASHMSA_MARK_IF(condition, mark) \
  if (condition) ::flashmsa::sm90::timeline_mark(::flashmsa::sm90::mark)
#define FLASHMSA_MARK_IF_BY(condition, thread, mark) \
  if (condition) ::flashmsa::sm90::timeline_mark(::flashmsa::sm90::mark, thread)
#define FLASHMSA_TIMELINE_PRINT() ::flashmsa::sm90::timeline_print()

#else

#define FLASHMSA_MARK(mark) ((void)0)
#define FLASHMSA_MARK_BY(thread, mark) ((void)0)
#define FLASHMSA_MARK_IF(condition, mark) ((void)0)
#define FLASHMSA_MARK_IF_BY(condition, thread, mark) ((void)0)
#define FLASHMSA_TIMELINE_PRINT() ((void)0)

#endif
