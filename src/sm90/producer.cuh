// The producer: one thread of warpgroup 0 streams K and V of the tile's union blocks, in union
// order, into the stage ring with TMA. Each block is four 16 KiB boxes (K and V, two 64-dim
// panels each) that complete on the stage's full barrier.
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>

#include "sm90/kernel_traits.h"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/ptx.cuh"

namespace flashmsa::sm90 {

// L2 policy of the loads: evict-normal (blocks are shared by neighbouring tiles of one head).
constexpr uint64_t kCacheHintEvictNormal = 0x1000000000000000ull;

// One block of K or V: two 64-dim panels. Flat maps are 3-D (dims, token row, head); paged
// maps 4-D (dims, token in page, head, page).
__device__ __forceinline__ void load_block(const CUtensorMap* map, uint64_t* barrier,
                                           uint8_t* destination, bool is_paged, int32_t coord,
                                           int32_t kv_head) {
#pragma unroll
  for (int panel = 0; panel < 2; ++panel) {
    uint8_t* panel_destination = destination + panel * kKvPanelBytes;
    if (is_paged) {
      cute::SM90_TMA_LOAD_4D::copy(map, barrier, kCacheHintEvictNormal, panel_destination,
                                   panel * kPanelElems, 0, kv_head, coord);
    } else {
      cute::SM90_TMA_LOAD_3D::copy(map, barrier, kCacheHintEvictNormal, panel_destination,
                                   panel * kPanelElems, coord, kv_head);
    }
  }
}

__device__ inline void produce(const PrefillParams& p, SharedStorage& smem, const TilePlan& plan,
                        int kv_head) {
  for (int u = 0; u < plan.union_size; ++u) {
    const int stage = u % kNumStages;
    const uint32_t phase = (u / kNumStages) & 1;
    mbarrier_wait(&smem.empty_barrier[stage], phase ^ 1);
    mbarrier_arrive_expect_tx(&smem.full_barrier[stage], kStageTxBytes);
    const int32_t coord = smem.union_coords[u];  // flat: token row; paged: page
    load_block(&p.tma_k, &smem.full_barrier[stage], smem.k[stage], p.is_paged, coord, kv_head);
    load_block(&p.tma_v, &smem.full_barrier[stage], smem.v[stage], p.is_paged, coord, kv_head);
  }
}

}  // namespace flashmsa::sm90
