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

// Starts bringing one block of K or V into L2 (no shared memory, no barrier): the TMA unit's
// prefetch form of load_block.
__device__ __forceinline__ void prefetch_block(const CUtensorMap* map, bool is_paged,
                                               int32_t coord, int32_t kv_head) {
  const uint64_t descriptor = reinterpret_cast<uint64_t>(map);
#pragma unroll
  for (int panel = 0; panel < 2; ++panel) {
    const int32_t dim = panel * kPanelElems;
    if (is_paged) {
      asm volatile(
          "cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];" ::"l"(
              descriptor),
          "r"(dim), "r"(0), "r"(kv_head), "r"(coord)
          : "memory");
    } else {
      asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];" ::"l"(
                       descriptor),
                   "r"(dim), "r"(coord), "r"(kv_head)
                   : "memory");
    }
  }
}

// Step i issues V of block i - 1, then K of block i. The consumers finish with V of block
// i - 3 (for its stage) before K of block i - 2, so V's stage is always free first, and with one
// stage per ring (the decode kernel) K and V of the first block go out together.
__device__ inline void produce(const PrefillParams& p, const Smem& smem, const TilePlan& plan,
                               int kv_head) {
  const int num_stages = p.smem_layout.num_stages;
  SmemHeader& header = smem.header();
  // Step i of the slice loads union entry slice_begin + i into stage i % num_stages.
  auto load = [&](bool value, int i) {
    const int stage = i % num_stages;
    uint64_t* full = value ? &header.v_full[stage] : &header.k_full[stage];
    uint64_t* empty = value ? &header.v_empty[stage] : &header.k_empty[stage];
    mbarrier_wait(empty, ((i / num_stages) & 1) ^ 1);
    mbarrier_arrive_expect_tx(full, kStageTxBytes);
    const int32_t coord = smem.union_coords()[plan.slice_begin + i];  // flat: row; paged: page
    load_block(value ? &p.tma_v : &p.tma_k, full, value ? smem.v(stage) : smem.k(stage),
               p.is_paged, coord, kv_head);
  };
  const int steps = plan.slice_end - plan.slice_begin;
  // Blocks [0, prefetched) of the slice are loaded or on their way to L2: with K(i), blocks up
  // to i + prefetch_blocks are.
  int prefetched = 1;
  for (int i = 0; i <= steps; ++i) {
    if (i > 0) load(true, i - 1);
    if (i < steps) load(false, i);
#pragma unroll 1
    for (; prefetched < min(steps, i + 1 + p.prefetch_blocks); ++prefetched) {
      const int32_t coord = smem.union_coords()[plan.slice_begin + prefetched];
      prefetch_block(&p.tma_k, p.is_paged, coord, kv_head);
      prefetch_block(&p.tma_v, p.is_paged, coord, kv_head);
    }
  }
}

}  // namespace flashmsa::sm90
