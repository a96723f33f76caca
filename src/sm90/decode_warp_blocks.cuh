// The decode kernel's consumer for converted K/V (fp8, NVFP4) on slices of several blocks
// (AttentionParams::warp_blocks): each of the four warps computes whole blocks of the slice
// alone, steps w, w + 4, w + 8, ..., as a token warp does (token_warp_consumer.cuh: the block's
// 128 keys and 128 dims for the token's 16 rows, converted in registers, with its own online
// softmax), and the four warps' states are merged once, after the loop.
// Why: the one-token consumer (decode_consumer.cuh) splits every block over the four warps
// (keys for S, dims for O), which meet at two barriers a block. Converted K/V make each block's
// conversions and products a long dependent chain, and at two CTAs per SM an SM holds eight
// consumer warps, so that chain, not the bytes, bounded the call. With blocks of their own the
// four warps of a CTA run four chains at once and never wait for each other inside the loop.
// A slice of one block (batch 1's splits) would leave three warps idle: those keep the
// one-token consumer (launch_plan.cpp).
#pragma once

#include <math.h>
#include <stdint.h>

#include "sm90/cluster_reduce.cuh"
#include "sm90/decode_consumer.cuh"
#include "sm90/kernel_traits.h"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/ptx.cuh"
#include "sm90/softmax.cuh"
#include "sm90/token_scales.cuh"
#include "sm90/token_warp_consumer.cuh"

namespace flashmsa::sm90 {

// The four warps' O, each times its weight, as fp32 rows [warp][row][dim] in the (idle) rings:
// rows of 132 floats, so that a warp's 16-byte stores of 16 rows fall in distinct bank groups.
constexpr int kMergeRowFloats = kHeadDim + 4;
static_assert(4 * kDecodeRows * kMergeRowFloats * sizeof(float) <= 3 * kNvfp4TileBytes * 2,
              "the merge rows must fit in the smallest rings (three NVFP4 stages of K and V)");

constexpr int kBlockParts = 4;
constexpr int kPartKeys = kBlockKeys / kBlockParts;
constexpr int kPartScores = kPartKeys / 2;  // a thread's S of a part of a block

__device__ __forceinline__ float* merge_rows(const Smem& smem) {
  return reinterpret_cast<float*>(smem.k(0));
}

// Step `step` of the slice is warp step % 4's; its stage and phase as RingCursor would reach
// them after `step` advances. A parity wait for phase n of a stage's full barrier is only right
// once phase n - 1 has completed (else it reads phase n - 2's completion as n's): step
// step - num_stages landed. With four stages that is the warp's own previous step; with two
// (the launch plan gives warp blocks no other count) it is another warp's, so the warp first
// waits for that step's release on the empty barrier, whose phase before that is the warp's own
// previous release (and the producer cannot load this step any earlier either).
struct WarpStep {
  int stage;
  uint32_t phase;
  bool follows_other_warp;  // step - num_stages is another warp's
};
__device__ __forceinline__ WarpStep warp_step(int step, int num_stages) {
  return WarpStep{step % num_stages, static_cast<uint32_t>((step / num_stages) & 1),
                  num_stages < 4 && step >= num_stages};
}
__device__ __forceinline__ void wait_for_landing(uint64_t* full, uint64_t* empty,
                                                 const WarpStep& at) {
  if (at.follows_other_warp) mbarrier_wait(empty, at.phase ^ 1);
  mbarrier_wait(full, at.phase);
}

template <typename Element, bool kTemperatureLse, KvFormat kKv>
__device__ inline void consume_one_token_by_warps(const AttentionParams& p, const Smem& smem,
                                                  const TilePlan& plan, int kv_head) {
  static_assert(kKv == KvFormat::kFp8 || kKv == KvFormat::kNvfp4,
                "q's-dtype K/V and per-token fp8 scales keep the one-token consumer");
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, l = lane % 4;
  SmemHeader& header = smem.header();
  OneTokenExchange& exchange = one_token_exchange(smem);
  bool row_valid[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) row_valid[h] = row_source(p, plan, 0, 0, g + 8 * h).valid;
  const int key_limit = smem.token_key_limit()[0];
  const GlobalScales scales = global_scales(p);
  constexpr uint32_t kSlotBytes = landed_tile_bytes(kKv);
  uint32_t q[kDimSteps][4];
  load_token_warp_queries(smem.q(0), 0, q);
  OnlineSoftmax<kTemperatureLse> softmax;
  softmax.init();
  TokenWarpOutput o;
#pragma unroll
  for (int i = 0; i < 4 * kValueTiles; ++i) o[i] = 0.f;

  const int num_stages = p.smem_layout.num_stages;
  const int steps = plan.slice_end - plan.slice_begin;
  for (int step = warp; step < steps; step += 4) {
    const WarpStep at = warp_step(step, num_stages);
    const int u = plan.slice_begin + step;
    const int block_first_key = smem.union_blocks()[u] * kBlockKeys;
    int visible[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      visible[h] = row_valid[h] ? min(max(key_limit - block_first_key, 0), kBlockKeys) : 0;
    }
    // The block in parts of 32 keys, each one step of the online softmax (S, P, P V): S of a
    // whole block (64 registers) beside Q's fragments and O did not fit the kernel's registers.
    wait_for_landing(&header.k_full[at.stage], &header.k_empty[at.stage], at);
#pragma unroll
    for (int part = 0; part < kBlockParts; ++part) {
      float s[kPartScores];
      if constexpr (is_nvfp4(kKv)) {
        token_warp_scores_nvfp4<Element, kPartKeys>(
            q, smem.compact_k(at.stage, kSlotBytes) + part * kPartKeys * kNvfp4RowBytes,
            smem.staged_block_scales(at.stage, false) + part * kPartKeys * kNvfp4ScaleCols, s);
      } else {
        token_warp_scores<Element, kPartKeys>(
            q, smem.compact_k(at.stage, kSlotBytes) + part * kPartKeys * kHeadDim, s);
      }
      if (part == kBlockParts - 1) release_stage(&header.k_empty[at.stage]);
      int part_visible[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) part_visible[h] = max(visible[h] - part * kPartKeys, 0);
      uint32_t probabilities[kPartScores / 2];
      float correction[2];
      softmax.template update<Element>(s, part_visible, scales.scale_log2, p.lse_temperature,
                                       probabilities, correction);
      OnlineSoftmax<kTemperatureLse>::rescale(o, correction);
      if (part == 0) wait_for_landing(&header.v_full[at.stage], &header.v_empty[at.stage], at);
      if constexpr (is_nvfp4(kKv)) {
        token_warp_values_nvfp4<Element, kPartKeys>(
            probabilities,
            smem.compact_v(at.stage, kSlotBytes) + part * kPartKeys * kNvfp4RowBytes,
            smem.staged_block_scales(at.stage, true) + part * kPartKeys * kNvfp4ScaleCols,
            p.nvfp4_page_local != 0, o);
      } else {
        token_warp_values<Element, kPartKeys>(
            probabilities, smem.compact_v(at.stage, kSlotBytes) + part * kPartKeys * kHeadDim,
            o);
      }
    }
    release_stage(&header.v_empty[at.stage]);
  }
  FLASHMSA_MARK(kMarkLoopDone);

  // The merge. Each row's maximum over the four warps' running maxima; each warp's sums and O
  // weighed by 2^(its max - that), so that every term is 2^(score - the row's maximum) as one
  // running softmax over the whole slice would have it. The first barrier also means every warp
  // is done with the rings, which the weighed O rows then take.
  float sum[2], sum_t[2];
  softmax.quad_sums(sum, sum_t);
  post_row_values(exchange.block_max, softmax.row_max);
  named_barrier_sync(kConsumerBarrier, 128);
  float weight[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float row_max = max_of_row_values(exchange.block_max, h);
    const float own = softmax.row_max[h];
    const bool any = row_max != -INFINITY;  // else every warp's sums are 0
    weight[h] = any ? exp2_flush(own - row_max) : 0.f;
    sum[h] *= weight[h];
    sum_t[h] *= any ? exp2_flush(p.lse_temperature * (own - row_max)) : 0.f;
    softmax.row_max[h] = row_max;
  }
  post_row_values(exchange.row_sum, sum);
  if (kTemperatureLse) post_row_values(exchange.row_sum_t, sum_t);
  // o[4i + 2h + c]: row g + 8h, dim 32l + 16c + i (TokenWarpOutput), four dims a store.
  float* rows = merge_rows(smem);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float* row = rows + (warp * kDecodeRows + g + 8 * h) * kMergeRowFloats + 32 * l;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
      for (int i0 = 0; i0 < 16; i0 += 4) {
        const int first = 4 * i0 + 2 * h + c;
        *reinterpret_cast<float4*>(row + 16 * c + i0) =
            make_float4(o[first] * weight[h], o[first + 4] * weight[h], o[first + 8] * weight[h],
                        o[first + 12] * weight[h]);
      }
    }
  }
  named_barrier_sync(kConsumerBarrier, 128);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sum[h] = sum_of_row_values(exchange.row_sum, h);
    if (kTemperatureLse) sum_t[h] = sum_of_row_values(exchange.row_sum_t, h);
  }
  // This warp's quarter of the rows in WarpOutput's order (dims 32w .. 32w + 31), the four
  // warps' terms added in a fixed order.
  WarpOutput merged;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float2 total = make_float2(0.f, 0.f);
#pragma unroll
      for (int from = 0; from < 4; ++from) {
        const float2 term = *reinterpret_cast<const float2*>(
            rows + (from * kDecodeRows + g + 8 * h) * kMergeRowFloats + 32 * warp + 8 * j + 2 * l);
        total.x += term.x;
        total.y += term.y;
      }
      merged[4 * j + 2 * h] = total.x;
      merged[4 * j + 2 * h + 1] = total.y;
    }
  }
  // The reductions below write into the rings (the pull's partial): every warp has read them.
  named_barrier_sync(kConsumerBarrier, 128);
  float lse[2], lse_t[2], scale[2];
  softmax.lse_of_sums(sum, sum_t, p.lse_temperature, lse, lse_t);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    scale[h] = sum[h] > 0.f ? scales.v_global_scale * reciprocal_flush(sum[h]) : 0.f;
  }
  // The push's addresses only now: held across the loop, beside O and Q's fragments, they
  // spilled (the one-token consumer prepares them while its first block is on its way).
  PushPlan<Element> push{};
  if (p.push_reduce) push = prepare_push<Element, kTemperatureLse>(p, smem, plan, kv_head, 0);
  const RowPartial partial = gather_row_partial(merged, scale, lse, lse_t);
  FLASHMSA_MARK(kMarkPublished);
  write_one_token_partial<Element, kTemperatureLse>(p, smem, plan, push, partial, kv_head, 0);
}

}  // namespace flashmsa::sm90
