// Device timeline for diagnosis, compiled in only with -DFLASHMSA_TIMELINE=ON (CMake option; the
// release kernels contain none of it). Thread 128 (the first consumer thread, which also takes
// part in block-wide planning; warp planning's phases are marked by thread 0) of two CTAs,
// blockIdx.x = 0 and FLASHMSA_TIMELINE_SECOND_CTA, stores %globaltimer at phase boundaries into a device array and prints the phases, in ns from
// kernel entry, after its epilogue (`TL cta ...` lines; scripts/timeline.py tabulates them).
// Stores, not printf, at the marks: a printf costs tens of microseconds and would be the timeline.
#pragma once

#include <stdint.h>

#ifdef FLASHMSA_TIMELINE
#include <cstdio>

#ifndef FLASHMSA_TIMELINE_SECOND_CTA
#define FLASHMSA_TIMELINE_SECOND_CTA 40
#endif

namespace flashmsa::sm90 {

enum TimelineMark {
  kMarkEntry, kMarkWaited, kMarkLocated, kMarkEntriesRead, kMarkNegativesCut, kMarkCandidates,
  kMarkSorted, kMarkCompacted, kMarkPlanned, kMarkQueriesLoaded, kMarkFirstK, kMarkFirstV,
  kMarkLastK, kMarkLoopDone, kMarkFirstScores, kMarkFirstSoftmax, kNumMarks
};

__device__ uint64_t g_timeline[2][kNumMarks];

__device__ __forceinline__ int timeline_slot(int thread = 128) {
  if (threadIdx.x != thread) return -1;
  return blockIdx.x == 0 ? 0 : blockIdx.x == FLASHMSA_TIMELINE_SECOND_CTA ? 1 : -1;
}

__device__ __forceinline__ uint64_t timeline_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void timeline_mark(TimelineMark mark, int thread = 128) {
  const int slot = timeline_slot(thread);
  if (slot >= 0) g_timeline[slot][mark] = timeline_now();
}

__device__ __forceinline__ void timeline_print() {
  const int slot = timeline_slot();
  if (slot < 0) return;
  const uint64_t* t = g_timeline[slot];
  const uint64_t end = timeline_now();
  printf("TL cta %d waited %llu located %llu entries %llu negatives %llu candidates %llu "
         "deduplicated %llu compacted %llu planned %llu q %llu first_k %llu first_v %llu last_k %llu "
         "loop %llu scores %llu softmax %llu end %llu\n",
         blockIdx.x, t[kMarkWaited] - t[kMarkEntry], t[kMarkLocated] - t[kMarkEntry],
         t[kMarkEntriesRead] - t[kMarkEntry], t[kMarkNegativesCut] - t[kMarkEntry],
         t[kMarkCandidates] - t[kMarkEntry], t[kMarkSorted] - t[kMarkEntry],
         t[kMarkCompacted] - t[kMarkEntry], t[kMarkPlanned] - t[kMarkEntry],
         t[kMarkQueriesLoaded] - t[kMarkEntry], t[kMarkFirstK] - t[kMarkEntry],
         t[kMarkFirstV] - t[kMarkEntry], t[kMarkLastK] - t[kMarkEntry],
         t[kMarkLoopDone] - t[kMarkEntry], t[kMarkFirstScores] - t[kMarkEntry],
         t[kMarkFirstSoftmax] - t[kMarkEntry], end - t[kMarkEntry]);
}

}  // namespace flashmsa::sm90

#define FLASHMSA_MARK(mark) ::flashmsa::sm90::timeline_mark(::flashmsa::sm90::mark)
#define FLASHMSA_MARK_BY(thread, mark) \
  ::flashmsa::sm90::timeline_mark(::flashmsa::sm90::mark, thread)
#define FLASHMSA_MARK_IF(condition, mark) \
  if (condition) ::flashmsa::sm90::timeline_mark(::flashmsa::sm90::mark)
#define FLASHMSA_TIMELINE_PRINT() ::flashmsa::sm90::timeline_print()

#else

#define FLASHMSA_MARK(mark) ((void)0)
#define FLASHMSA_MARK_BY(thread, mark) ((void)0)
#define FLASHMSA_MARK_IF(condition, mark) ((void)0)
#define FLASHMSA_TIMELINE_PRINT() ((void)0)

#endif
