// The producer: one thread of warpgroup 0 streams K and V of the tile's union blocks, in union
// order, into the stage ring with TMA. Each block is four 16 KiB boxes (K and V, two 64-dim
// panels each) that complete on the stage's full barrier.
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>

#include "sm90/kernel_traits.h"
#include "sm90/nvfp4_convert.cuh"
#include "sm90/pacing.cuh"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/ptx.cuh"
#include "sm90/timeline.cuh"
#include "sm90/token_scales.cuh"

namespace flashmsa::sm90 {

// The kernel's shared memory view: the dynamic buffer rounded up to 1024 bytes (the 128B swizzle
// of TMA and wgmma operands starts there; the launch adds kSharedMemoryAlignmentSlack).
__device__ __forceinline__ Smem aligned_smem(uint8_t* raw, const SmemLayout& layout) {
  const uint32_t misalignment = smem_address(raw) % 1024;
  return Smem{raw + (1024 - misalignment) % 1024, layout};
}

// Thread 0 at kernel entry: the K and V rings' barriers (full: the producer's arrive plus the
// TMA bytes, and the scale stager's 32 arrives where blocks carry scales; empty: every consumer
// thread's arrive; converted: every converter thread's, producer_converts), the speculative load's (kernels that
// speculate) and the push reduction's receive barrier (its owner's own arrive plus the pushed
// bytes), then the fence that publishes them to the cluster. No speculative load yet.
__device__ __forceinline__ void init_barriers(SmemHeader& header, int num_stages,
                                              uint32_t consumer_threads, bool speculates,
                                              uint32_t full_arrivals = 1,
                                              uint32_t converter_threads = 0) {
  for (int stage = 0; stage < num_stages; ++stage) {
    mbarrier_init(&header.k_full[stage], full_arrivals);
    mbarrier_init(&header.v_full[stage], full_arrivals);
    mbarrier_init(&header.k_empty[stage], consumer_threads);
    mbarrier_init(&header.v_empty[stage], consumer_threads);
    if (converter_threads > 0) {
      mbarrier_init(&header.k_converted[stage], converter_threads);
      mbarrier_init(&header.v_converted[stage], converter_threads);
      mbarrier_init(&header.raw_k_empty[stage], converter_threads);
      mbarrier_init(&header.raw_v_empty[stage], converter_threads);
    }
  }
  if (speculates) {
    mbarrier_init(&header.speculative_k_full, 1);
    mbarrier_init(&header.speculative_v_full, 1);
  }
  mbarrier_init(&header.received_full, 1);
  header.speculative_issued = 0;
  fence_barrier_init();
}

// One block of K or V: two 64-dim panels. Flat maps are 3-D (dims, token row, head); paged
// maps 4-D (dims, token in page, head, page).
__device__ __forceinline__ void load_block(const CUtensorMap* map, uint64_t* barrier,
                                           uint8_t* destination, bool is_paged, int32_t coord,
                                           int32_t kv_head, uint64_t cache_hint) {
#pragma unroll
  for (int panel = 0; panel < 2; ++panel) {
    uint8_t* panel_destination = destination + panel * kKvPanelBytes;
    if (is_paged) {
      cute::SM90_TMA_LOAD_4D::copy(map, barrier, cache_hint, panel_destination,
                                   panel * kPanelElems, 0, kv_head, coord);
    } else {
      cute::SM90_TMA_LOAD_3D::copy(map, barrier, cache_hint, panel_destination,
                                   panel * kPanelElems, coord, kv_head);
    }
  }
}

// One fp8 or NVFP4 block of K or V: its rows (128 or 64 bytes) as one box, to `destination`:
// the stage's upper half or last quarter, where the consumers rewrite or read it, or a compact
// stage (landing_offset, kernel_traits.h). Maps as load_block's, of one-byte elements.
__device__ __forceinline__ void load_byte_block(const CUtensorMap* map, uint64_t* barrier,
                                                uint8_t* destination, bool is_paged,
                                                int32_t coord, int32_t kv_head,
                                                uint64_t cache_hint) {
  if (is_paged) {
    cute::SM90_TMA_LOAD_4D::copy(map, barrier, cache_hint, destination, 0, 0, kv_head, coord);
  } else {
    cute::SM90_TMA_LOAD_3D::copy(map, barrier, cache_hint, destination, 0, coord, kv_head);
  }
}

// Arms `barrier` for one operand's bytes and loads the block into the stage at `destination`.
template <KvFormat kKv = KvFormat::kNative, bool kCompact = false>
__device__ __forceinline__ void load_operand(const AttentionParams& p, const CUtensorMap* map,
                                             uint64_t* barrier, uint8_t* destination,
                                             int32_t coord, int32_t kv_head) {
  if constexpr (is_converted(kKv)) {
    mbarrier_arrive_expect_tx(barrier, landed_tile_bytes(kKv));
    load_byte_block(map, barrier, kCompact ? destination : destination + landing_offset(kKv),
                    p.is_paged, coord, kv_head, p.kv_cache_hint);
  } else {
    mbarrier_arrive_expect_tx(barrier, kStageTxBytes);
    load_block(map, barrier, destination, p.is_paged, coord, kv_head, p.kv_cache_hint);
  }
}

// A block whose K and V the producer loaded into stage 0 before planning ended (warp planning's
// speculation, warp_planning.cuh), completing on the header's speculative barriers rather than
// the stage's; block -1: none.
struct SpeculativeLoad {
  int32_t block;
  int32_t coord;
};

__device__ __forceinline__ void issue_speculative_load(const AttentionParams& p, const Smem& smem,
                                                       const SpeculativeLoad& load,
                                                       int kv_head) {
  SmemHeader& header = smem.header();
  header.speculative_issued = 1;
  load_operand(p, &p.tma_k, &header.speculative_k_full, smem.k(0), load.coord, kv_head);
  load_operand(p, &p.tma_v, &header.speculative_v_full, smem.v(0), load.coord, kv_head);
}

// Before the consumers reuse stage 0 as scratch at the end: a speculative load that the plan did
// not use may still be landing there.
__device__ __forceinline__ void wait_for_speculative_load(const Smem& smem) {
  SmemHeader& header = smem.header();
  if (header.speculative_issued) {
    mbarrier_wait(&header.speculative_k_full, 0);
    mbarrier_wait(&header.speculative_v_full, 0);
  }
}

// K(i), then V(i), for each block of the slice, in union order: K(i) waits for the consumers to
// finish S of block i - num_stages, V(i) for P V of that block, so each ring's stage is free in
// the order the loads need it, and with one stage per ring (the decode kernel) K and V of the
// first block go out together from one stretch of code. A speculative load is waited for
// first (stage 0 must not receive two copies at once); if it is the slice's first block, its
// landing is forwarded to the stage-0 barriers (a plain arrive completes their phase), else the
// block is loaded again. kMayPace (the two-consumer kernel): with p.pacing_slack > 0 the pacer
// may exempt the CTA from the throttle (pacing.cuh); the one-token decode kernel compiles none
// of it. kKv: the K/V format (its box and bytes); the launch plan gives converted formats
// neither speculation nor pacing. kCompact: rings of one box a stage (the token-warp kernel).
template <bool kMayPace = false, KvFormat kKv = KvFormat::kNative, bool kCompact = false>
__device__ inline void produce(const AttentionParams& p, const Smem& smem, const TilePlan& plan,
                               int kv_head, const SpeculativeLoad& speculative) {
  const int num_stages = p.smem_layout.num_stages;
  SmemHeader& header = smem.header();
  // Step i of the slice loads union entry slice_begin + i into its ring slot (planning.cuh).
  auto load = [&](bool value, const RingCursor& slot, int32_t coord) {
    const int stage = slot.stage;
    uint64_t* full = value ? &header.v_full[stage] : &header.k_full[stage];
    uint64_t* empty = value ? &header.v_empty[stage] : &header.k_empty[stage];
    mbarrier_wait(empty, slot.phase ^ 1);
    constexpr uint32_t kSlotBytes = landed_tile_bytes(kKv);
    uint8_t* destination =
        kCompact ? (value ? smem.compact_v(stage, kSlotBytes) : smem.compact_k(stage, kSlotBytes))
                 : (value ? smem.v(stage) : smem.k(stage));
    load_operand<kKv, kCompact>(p, value ? &p.tma_v : &p.tma_k, full, destination, coord,
                                kv_head);
  };
  const int steps = plan.slice_end - plan.slice_begin;
  int first_step = 0;
  if (kKv == KvFormat::kNative && speculative.block >= 0) {
    const bool holds = steps > 0 && smem.union_blocks()[plan.slice_begin] == speculative.block &&
                       smem.union_coords()[plan.slice_begin] == speculative.coord;
    mbarrier_wait(&header.speculative_k_full, 0);
    if (holds) mbarrier_arrive(&header.k_full[0]);
    mbarrier_wait(&header.speculative_v_full, 0);
    if (holds) mbarrier_arrive(&header.v_full[0]);
    first_step = holds ? 1 : 0;
  }
  // The throttle (multi-token prediction's default, launch_plan.cpp: SMs with more than 64 KiB in
  // flight get unequal shares of the DRAM bandwidth) waits for step i - 1's operands to land.
  // Its stage's next phase needs step i - 1 + num_stages >= i + 1, not issued yet, so the
  // parity wait cannot miss a phase; with one stage it could, and the launch leaves the
  // throttle off there.
  // (Read from the parameter block at each use: the producer warpgroup has 24 registers.)
  const bool paced = kMayPace && kKv == KvFormat::kNative && p.pacing_slack > 0 && steps > 0;
  if (paced) {
    pacing_join(steps);
    if (first_step == 1) pacing_count_step(header, 1);
  }
  RingCursor ring;
  if (first_step == 1) ring.advance(num_stages);
  for (int i = first_step; i < steps; ++i, ring.advance(num_stages)) {
    const int32_t coord = smem.union_coords()[plan.slice_begin + i];  // flat: row; paged: page
    const RingCursor last = ring.previous(num_stages);  // step i - 1's slot (i > 0)
    const bool throttled = i > 0 && !(paced && pacing_boosted(header));
    if (p.inflight_throttle >= 2 && throttled) {
      mbarrier_wait(&header.v_full[last.stage], last.phase);
    }
    load(false, ring, coord);
    FLASHMSA_MARK_IF_BY(i == first_step, 0, kMarkFirstKIssued);
    if (p.inflight_throttle >= 1 && throttled) {
      mbarrier_wait(&header.k_full[last.stage], last.phase);
    }
    load(true, ring, coord);
    FLASHMSA_MARK_IF_BY(i == first_step, 0, kMarkFirstIssued);
    if (paced) pacing_count_step(header, i + 1);
  }
  if (paced) pacing_leave();
}

// Where a warp that loads the blocks itself (stage_scales_beside_blocks' kLoadsBlocks) lands
// them: compact stages (the decode kernel), the upper part of full stages that the converter
// warps rewrite in place (the fp8 union tile), or the NVFP4 union tile's raw ring, which the
// converter warps release on its own empty barriers (producer_converts, kernel_traits.h).
enum class Landing { kCompact, kFullStage, kRawRing };

// One warp stages each union block's scales into its stage once the stage is free (the
// producer's empty barriers), by asynchronous copies, as the producer's TMA loads do, so that
// it never waits for their data; each lane's copies arrive on the stage's full barrier when
// they land (full_barrier_arrivals). kLoadsBlocks: the warp's lane 0 is also the producer (the
// decode kernel's warp 0; the union tile's warp 0 where converter warps rewrite its stages),
// landing its boxes as kLanding says, where the prefill kernel's producer is another thread
// otherwise (warp 1 of its producer warpgroup stages).
template <KvFormat kKv, bool kLoadsBlocks, Landing kLanding = Landing::kCompact>
__device__ inline void stage_scales_beside_blocks(const AttentionParams& p, const Smem& smem,
                                                  const TilePlan& plan, int kv_head) {
  static_assert(stages_scales(kKv), "only NVFP4 and per-token fp8 blocks carry staged scales");
  static_assert(kLanding != Landing::kRawRing || is_nvfp4(kKv), "the raw ring holds NVFP4");
  constexpr bool kRawRing = kLanding == Landing::kRawRing;
  const int num_stages = kRawRing ? p.smem_layout.raw_stages : p.smem_layout.num_stages;
  SmemHeader& header = smem.header();
  const TokenScaleRows token_scales = token_scale_rows(p, kv_head);
  constexpr uint32_t kSlotBytes = landed_tile_bytes(kKv);
  RingCursor ring;
  for (int u = plan.slice_begin; u < plan.slice_end; ++u, ring.advance(num_stages)) {
    const int32_t coord = smem.union_coords()[u];
    const int valid_keys = plan.seqlen_k - smem.union_blocks()[u] * kBlockKeys;
#pragma unroll 1
    for (int value = 0; value < 2; ++value) {
      uint64_t* full = value ? &header.v_full[ring.stage] : &header.k_full[ring.stage];
      uint64_t* empty =
          kRawRing ? (value ? &header.raw_v_empty[ring.stage] : &header.raw_k_empty[ring.stage])
                   : (value ? &header.v_empty[ring.stage] : &header.k_empty[ring.stage]);
      mbarrier_wait(empty, ring.phase ^ 1);
      if (kLoadsBlocks && threadIdx.x % 32 == 0) {
        uint8_t* destination =
            kLanding == Landing::kFullStage ? (value ? smem.v(ring.stage) : smem.k(ring.stage))
            : kRawRing                      ? (value ? smem.raw_v(ring.stage)
                                                     : smem.raw_k(ring.stage))
                                            : (value ? smem.compact_v(ring.stage, kSlotBytes)
                                                     : smem.compact_k(ring.stage, kSlotBytes));
        load_operand<kKv, kLanding != Landing::kFullStage>(
            p, value ? &p.tma_v : &p.tma_k, full, destination, coord, kv_head);
      }
      if constexpr (is_nvfp4(kKv)) {
        stage_operand_scales(nvfp4_block_scales(p, value, coord, kv_head, valid_keys), value,
                             smem.staged_block_scales(ring.stage, value));
      } else {
        stage_operand_token_scales(operand_row(token_scales, value),
                                   block_first_slot(p, coord), valid_keys,
                                   smem.staged_token_scales(ring.stage, value));
      }
      arrive_when_copied(full);
    }
  }
}

// The converter warps (producer_converts): each union block's K, then V, rewritten as q's dtype
// once it landed (the full barrier counts the stager's arrivals where blocks carry scales),
// fenced into the async proxy (the consumers' wgmma read it) and announced on the stage's
// converted barrier. fp8 is rewritten in place (kv_convert.cuh), so the consumers' release of
// a stage also frees it for the next box. NVFP4 is read from the raw ring (its own cursor,
// released on its empty barriers once read) into a full stage that the consumers released.
template <typename Element, KvFormat kKv>
__device__ inline void convert_stages(const AttentionParams& p, const Smem& smem,
                                      const TilePlan& plan) {
  const int num_stages = p.smem_layout.num_stages;
  const int raw_stages = p.smem_layout.raw_stages;
  SmemHeader& header = smem.header();
  const int worker = threadIdx.x - kFirstConverterThread;
  // V's scales staged from page-local planes keep their token-quad order (stage_operand_scales).
  const bool value_token_quads = p.nvfp4_page_local != 0;
  RingCursor ring, raw;
  for (int u = plan.slice_begin; u < plan.slice_end;
       ++u, ring.advance(num_stages), raw.advance(is_nvfp4(kKv) ? raw_stages : num_stages)) {
#pragma unroll 1
    for (int value = 0; value < 2; ++value) {
      uint8_t* stage = value ? smem.v(ring.stage) : smem.k(ring.stage);
      if constexpr (is_nvfp4(kKv)) {
        mbarrier_wait(value ? &header.v_empty[ring.stage] : &header.k_empty[ring.stage],
                      ring.phase ^ 1);
        mbarrier_wait(value ? &header.v_full[raw.stage] : &header.k_full[raw.stage], raw.phase);
        convert_nvfp4_block<Element>(value ? smem.raw_v(raw.stage) : smem.raw_k(raw.stage),
                                     smem.staged_block_scales(raw.stage, value),
                                     value && value_token_quads, stage, worker);
        mbarrier_arrive(value ? &header.raw_v_empty[raw.stage] : &header.raw_k_empty[raw.stage]);
      } else {
        mbarrier_wait(value ? &header.v_full[ring.stage] : &header.k_full[ring.stage],
                      ring.phase);
        for (int row = worker; row < kBlockKeys; row += kConverterThreads) {
          convert_fp8_row<Element>(stage, row);
        }
      }
      fence_proxy_async_shared();
      mbarrier_arrive(value ? &header.v_converted[ring.stage] : &header.k_converted[ring.stage]);
    }
  }
}

}  // namespace flashmsa::sm90
