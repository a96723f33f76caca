// The Hopper MSA kernel: one CTA per (query tile, KV head, head chunk, KV split).
//   planning (all threads, or warp 0 while the consumers load Q) -> warpgroup 0: TMA producer |
//   warpgroups 1..kConsumers: wgmma.
// See docs/design.md for the tiling and the union-of-blocks plan, and docs/performance.md for
// what limits it.
#pragma once

#include "sm90/consumer.cuh"
#include "sm90/decode_consumer.cuh"
#include "sm90/kernel_traits.h"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/producer.cuh"
#include "sm90/ptx.cuh"
#include "sm90/timeline.cuh"
#include "sm90/token_warp_consumer.cuh"
#include "sm90/warp_planning.cuh"

namespace flashmsa::sm90 {

// Locates the CTA's tile, plans it and loads the consumers' Q rows; ends with a barrier after
// which the plan is in shared memory. batch_index < 0: no tile for this CTA. Warp planning
// (decode) loads the guessed tile's index entries and page-table row in the same round of loads
// as the request scan; then the producer's lane issues the speculative first block (thread 0
// before warp 0's entry-order plan, warp 1 beside warp 0's sorted plan) and warp 0 plans while
// the consumers load Q.
template <typename Element, int kConsumers>
__device__ __forceinline__ TilePlan prepare_tile(const AttentionParams& params, const Smem& smem,
                                                 const CtaWork& work,
                                                 SpeculativeLoad& speculative) {
  const bool warp_planning = plans_in_one_warp(params);
  const bool sorted_plan = warp_planning && sorts_in_one_warp(params);
  const TileGuess guess = warp_planning ? guess_tile(params, work.tile) : TileGuess{-1, 0, 0};
  const int page_row_length = cached_page_row_length(params, guess);
  WarpEntries entries;
  PageRowLoads page_row;
  if (warp_planning) {
    if (threadIdx.x >= 32) {
      page_row = load_page_row(params, guess.batch_index, page_row_length);
    }
    // Warp 0 plans from the entries; warp 1 guesses the sorted plan's first block from them.
    const bool holds_entries = threadIdx.x < 32 || (sorted_plan && threadIdx.x < 64);
    if (holds_entries && guess.batch_index >= 0) {
      entries = load_warp_entries(params, guess.first_row, guess.num_tokens, work.kv_head);
    }
  }
  locate_tile(params, smem, work.tile);
  if (warp_planning && threadIdx.x >= 32) {
    store_page_row([&] { return smem.page_row(); }, page_row, page_row_length);
  }
  __syncthreads();
  FLASHMSA_MARK(kMarkLocated);
  const SmemHeader& header = smem.header();
  if (header.batch_index < 0) return tile_plan(header, 0, 0, one_split());
  const bool is_consumer = threadIdx.x >= 128;
  if (warp_planning) {
    if (threadIdx.x < 32 && sorted_plan) {
      plan_tile_sorted_in_warp(params, smem, entries, guess, work.kv_head, page_row_length);
    } else if (threadIdx.x < 64 && sorted_plan) {
      speculate_lowest_block(params, smem, entries, guess, work.kv_head, page_row_length);
    } else if (threadIdx.x < 32) {
      speculative = speculate_first_block(params, smem, entries, guess, work.kv_head, work.split,
                                          page_row_length);
      FLASHMSA_MARK_BY(0, kMarkSpeculated);
      plan_tile_in_warp(params, smem, entries, guess, work.kv_head, page_row_length);
    } else if (is_consumer) {
      load_tile_queries<Element, kConsumers>(params, smem, tile_plan(header, 0, 0, one_split()),
                                             work.kv_head, work.head_chunk);
    }
    __syncthreads();
    if (sorted_plan) speculative = {header.speculative_block, header.speculative_coord};
    return tile_plan(header, header.union_size, work.split, params.splits_divisor);
  }
  const TilePlan plan = plan_union(params, smem, work.kv_head, work.split);  // ends with a barrier
  if (is_consumer) {
    load_tile_queries<Element, kConsumers>(params, smem, plan, work.kv_head, work.head_chunk);
  }
  return plan;
}

// kKv: how K and V are stored (kernel_traits.h); the two-consumer union tile's converter warps
// or the one-consumer union tile's consumers rewrite converted formats' stages (kv_convert.cuh,
// nvfp4_convert.cuh), the one-token consumer converts them in registers. kTokenWarps: the two-consumer fp8 or NVFP4 kernel whose warps each
// compute their own rows' blocks, converting in registers (token_warp_consumer.cuh), on compact
// rings.
template <typename Element, bool kTemperatureLse, int kConsumers,
          KvFormat kKv = KvFormat::kNative, bool kTokenWarps = false>
__global__ void __launch_bounds__(RoleConfig<kConsumers>::kThreads,
                                  RoleConfig<kConsumers>::kCtasPerSm)
    prefill_kernel(const __grid_constant__ AttentionParams params) {
  using Roles = RoleConfig<kConsumers, kKv>;
  static_assert(!kTokenWarps || (kConsumers == 2 && is_converted(kKv)),
                "the token-warp consumer takes two consumer warpgroups and fp8 or NVFP4 K/V");
  static_assert(!is_nvfp4(kKv) || kConsumers == 2,
                "NVFP4 K/V run the two-consumer kernel (its converter warps or token warps)");
  // NVFP4 and per-token fp8: the producer warpgroup's warp 1 stages each block's scales beside
  // it. Two-consumer union tiles of converted formats: its warps 1-3 rewrite each stage, and
  // warp 0 stages the scales beside the boxes its lane 0 loads.
  constexpr bool kStagesScales = stages_scales(kKv);
  constexpr bool kProducerConverts = producer_converts(kConsumers, kKv, kTokenWarps);
  extern __shared__ uint8_t shared_memory_raw[];
  const Smem smem = aligned_smem(shared_memory_raw, params.smem_layout);
  const CtaWork work = cta_work(params);

  FLASHMSA_MARK(kMarkEntry);
  if (threadIdx.x == 0) {
    init_barriers(smem.header(),
                  max(params.smem_layout.num_stages, params.smem_layout.raw_stages),
                  128 * kConsumers, true, full_barrier_arrivals(kKv),
                  kProducerConverts ? kConverterThreads : 0);
    smem.header().pacing_progress = 0;
    smem.header().pacing_boost = 0;
  } else if (threadIdx.x == 32) {
    prefetch_tensor_map(&params.tma_k);
    prefetch_tensor_map(&params.tma_v);
  }
  if (params.push_reduce) set_up_push<kTemperatureLse>(params, smem, work.split);
  // Everything above overlaps the previous kernel's tail (programmatic dependent launch); the
  // inputs it may have written are read only from here on.
  wait_for_previous_grid();
  FLASHMSA_MARK(kMarkWaited);

  SpeculativeLoad speculative{-1, -1};
  const TilePlan plan = prepare_tile<Element, kConsumers>(params, smem, work, speculative);
  // The merge kernel of a KV split (and the next kernel of the stream) may now be scheduled: it
  // waits for this grid to complete before it reads anything.
  allow_next_grid_launch();
  FLASHMSA_MARK(kMarkPlanned);
  if (plan.batch_index < 0) return;

  if (threadIdx.x < 128) {
    registers_decrease<Roles::kProducerRegisters>();
    if (kProducerConverts && kStagesScales && threadIdx.x < 32) {
      if constexpr (kProducerConverts && kStagesScales) {
        constexpr Landing kLanding = is_nvfp4(kKv) ? Landing::kRawRing : Landing::kFullStage;
        stage_scales_beside_blocks<kKv, true, kLanding>(params, smem, plan, work.kv_head);
      }
    } else if (threadIdx.x == 0) {
      produce<kConsumers == 2, kKv, kTokenWarps>(params, smem, plan, work.kv_head, speculative);
    } else if (kStagesScales && !kProducerConverts && threadIdx.x / 32 == 1) {
      if constexpr (kStagesScales) {
        stage_scales_beside_blocks<kKv, false>(params, smem, plan, work.kv_head);
      }
    } else if (kProducerConverts && threadIdx.x >= kFirstConverterThread) {
      if constexpr (kProducerConverts) convert_stages<Element, kKv>(params, smem, plan);
    } else if (kConsumers == 2 && threadIdx.x == 32 && params.pacing_slack > 0) {
      pace(params, smem.header(), plan.slice_end - plan.slice_begin);
    }
  } else {
    registers_increase<Roles::kConsumerRegisters>();
    if (kConsumers == 1 && runs_one_token_consumer(params, plan)) {
      consume_one_token<Element, kTemperatureLse, kKv>(params, smem, plan, work.kv_head,
                                                  work.head_chunk);
    } else if constexpr (kTokenWarps) {
      consume_token_warps<Element, kTemperatureLse, kKv>(params, smem, plan, work.kv_head,
                                                         work.head_chunk);
    } else {
      consume<Element, kTemperatureLse, kConsumers, kKv>(params, smem, plan, work.kv_head,
                                                    work.head_chunk);
    }
  }
}

}  // namespace flashmsa::sm90
