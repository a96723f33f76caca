// A consumer warpgroup of the prefill kernel computing its 64 rows as four row tiles of 16 (one
// token's 16 heads each at MiniMax-M3's group, or several tokens' heads at smaller groups), each
// only on the blocks its tokens selected, with all four warps on every row tile it computes: the
// one-token decode consumer's split (decode_consumer.cuh), over a warpgroup's row tiles.
//   S = Q_t K^T   warp w: keys 32w .. 32w + 31 of the block, for every row tile t that reads it;
//                 the row maxima go through shared memory (one barrier a block);
//   P_t           warp w's probabilities of its keys go to shared memory (double-buffered: one
//                 barrier a row tile);
//   O_t += P_t V  warp w: head dims 32w .. 32w + 31 of row tile t over all 128 keys.
// The union tile's wgmma computes a block for all 64 rows whichever of them selected it: 1.5-3.5x
// the useful work on MiniMax-M3's selections (docs/performance.md, "The union tile as built").
// Here the work is the useful work, and unlike one warp per row tile with mma.sync (measured:
// with two stages, only the one or two warps of 8 whose tokens selected a resident block
// compute) every warp takes a quarter of every row tile's work.
// Each warp holds O of its 32 dims for the four row tiles (4 x 16 values), and the softmax state
// of its rows per row tile.
#pragma once

#include <stdint.h>

#include "sm90/cluster_reduce.cuh"
#include "sm90/decode_consumer.cuh"
#include "sm90/kernel_traits.h"
#include "sm90/mma.cuh"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/ptx.cuh"
#include "sm90/softmax.cuh"
#include "sm90/split_combine.cuh"

namespace flashmsa::sm90 {

constexpr int kRowTiles = kRowsPerWarpgroup / kDecodeRows;  // 4 row tiles of 16 rows
static_assert(kRowTiles == 4, "consume_token_tiles tests four row tiles");

// What a warpgroup's four warps exchange (SmemLayout::token_tile_exchange, one per warpgroup).
struct TokenTileExchange {
  ProbabilityFragments probabilities[2];  // P of one row tile, double-buffered
  float4 block_max[kRowTiles][kDecodeRows];  // [tile][row]: the four warps' maxima
  float4 row_sum[kRowTiles][kDecodeRows];    // [tile][row]: the four warps' sums, at the end
  float4 row_sum_t[kRowTiles][kDecodeRows];
};

static_assert(sizeof(TokenTileExchange) == kTokenTileExchangeBytes,
              "SmemLayout::token_tile_exchange sizes it from kernel_traits.h");

__device__ __forceinline__ TokenTileExchange& token_tile_exchange(const Smem& smem,
                                                                  int warpgroup) {
  return reinterpret_cast<TokenTileExchange*>(smem.base + smem.layout.header +
                                              kTokenTileExchangeOffset)[warpgroup];
}

// Launch-uniform per CTA, in the token-tile kernel: the tile's warpgroups own their rows (not
// the shared-rows decode mode, consumer.cuh, which runs as before).
__device__ __forceinline__ bool runs_token_tiles(const AttentionParams& p, const TilePlan& plan) {
  return plan.num_tokens > p.tokens_per_warpgroup;
}

// q's-dtype K/V only (the converted formats rewrite their stages for the wgmma consumer).
template <typename Element, bool kTemperatureLse>
__device__ inline void consume_token_tiles(const AttentionParams& p, const Smem& smem,
                                           const TilePlan& plan, int kv_head, int head_chunk) {
  const int warpgroup = threadIdx.x / 128 - 1;
  const int thread = threadIdx.x % 128;
  const int warp = thread / 32, lane = thread % 32;
  const int first_key = warp * kKeysPerWarp;         // of each block, for S
  const int first_chunk = warp * kDimChunksPerWarp;  // of each V row, for O
  SmemHeader& header = smem.header();
  TokenTileExchange& exchange = token_tile_exchange(smem, warpgroup);
  const uint32_t q_tile = smem_address(smem.q(warpgroup));

  // The two rows of each row tile this thread holds (rows 16 t + lane / 4 + 8 h of the
  // warpgroup's 64): their tile token (-1: no such row) and the keys they may see.
  int row_token[kRowTiles][2], key_limit[kRowTiles][2];
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const RowSource source =
          row_source(p, plan, warpgroup, head_chunk, kDecodeRows * t + lane / 4 + 8 * h);
      row_token[t][h] = source.valid ? source.tile_token : -1;
      key_limit[t][h] = source.valid ? smem.token_key_limit()[source.tile_token] : 0;
    }
  }
  const GlobalScales scales = global_scales(p);
  OnlineSoftmax<kTemperatureLse> softmax[kRowTiles];
  WarpOutput o[kRowTiles];
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
    softmax[t].init();
#pragma unroll
    for (int i = 0; i < 4 * kDimsPerWarp / 8; ++i) o[t][i] = 0.f;
  }

  const int num_stages = p.smem_layout.num_stages;
  int buffer = 0;  // the P buffer the next row tile writes
  RingCursor ring;
  for (int u = plan.slice_begin; u < plan.slice_end; ++u, ring.advance(num_stages)) {
    const int stage = ring.stage;
    const uint32_t phase = ring.phase;
    const uint32_t* selected_by = smem.token_mask(u);
    const int block_first_key = smem.union_blocks()[u] * kBlockKeys;
    // The keys of this warp's 32 each row sees; a row tile reads the block when one of its rows
    // sees a key of it. Every warp holds the same rows, so the tiles read are the warpgroup's.
    int visible[kRowTiles][2];
    bool tile_reads[kRowTiles];
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t) {
      bool any = false;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int token = row_token[t][h];
        const bool selected = token >= 0 && ((selected_by[token / 32] >> (token % 32)) & 1);
        const int seen = selected ? min(max(key_limit[t][h] - block_first_key, 0), kBlockKeys) : 0;
        any |= seen > 0;
        visible[t][h] = seen - first_key;
      }
      tile_reads[t] = __any_sync(0xffffffffu, any);
    }

    mbarrier_wait(&header.k_full[stage], phase);
    if (!(tile_reads[0] || tile_reads[1] || tile_reads[2] || tile_reads[3])) {
      // Arrive on both rings in order, without reading: keeps the barrier phases aligned.
      mbarrier_arrive(&header.k_empty[stage]);
      mbarrier_wait(&header.v_full[stage], phase);
      mbarrier_arrive(&header.v_empty[stage]);
      continue;
    }
    float s[kRowTiles][4 * kWarpScoreTiles];
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t) {
      if (!tile_reads[t]) continue;
      warp_scores<Element>(q_tile, smem_address(smem.k(stage)), first_key, s[t],
                           kDecodeRows * t);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float row_max = max_over_row_quad(OnlineSoftmax<kTemperatureLse>::scale_and_mask_row(
            s[t], h, visible[t][h], scales.scale_log2));
        if (lane % 4 == 0) {
          reinterpret_cast<float*>(&exchange.block_max[t][lane / 4 + 8 * h])[warp] = row_max;
        }
      }
    }
    release_stage(&header.k_empty[stage]);
    // Every warp's maxima are posted; the barrier also means every warp is done with the P
    // buffers of the previous block.
    named_barrier_sync(1 + warpgroup, 128);

    mbarrier_wait(&header.v_full[stage], phase);
    if (plan.seqlen_k - block_first_key < kBlockKeys) {
      zero_warp_value_tail(smem.v(stage), max(plan.seqlen_k - block_first_key, 0), first_chunk);
    }
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t) {
      if (!tile_reads[t]) continue;
      float correction[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        correction[h] = softmax[t].exponentiate_row(
            s[t], h, max_of_row_values(exchange.block_max[t], h), p.lse_temperature);
      }
      uint32_t probabilities[2 * kWarpScoreTiles];
      OnlineSoftmax<kTemperatureLse>::template pack_probabilities<Element>(s[t], probabilities);
      share_probabilities(exchange.probabilities[buffer], probabilities);
      OnlineSoftmax<kTemperatureLse>::rescale(o[t], correction);
      // P of all 128 keys is posted; the buffer written next was last read before the previous
      // row tile's barrier (or the block's).
      named_barrier_sync(1 + warpgroup, 128);
      warp_values<Element>(exchange.probabilities[buffer], smem_address(smem.v(stage)),
                           first_chunk, o[t]);
      buffer ^= 1;
    }
    release_stage(&header.v_empty[stage]);
  }

  // Epilogue: the rows' sums over the four warps' keys, then each row tile's normalised rows
  // (fp32 partials to the workspace with a KV split).
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
    float sum[2], sum_t[2];
    softmax[t].quad_sums(sum, sum_t);
    post_row_values(exchange.row_sum[t], sum);
    if (kTemperatureLse) post_row_values(exchange.row_sum_t[t], sum_t);
  }
  named_barrier_sync(1 + warpgroup, 128);
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
    float sum[2], sum_t[2], lse[2], lse_t[2], scale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sum[h] = sum_of_row_values(exchange.row_sum[t], h);
      sum_t[h] = kTemperatureLse ? sum_of_row_values(exchange.row_sum_t[t], h) : 0.f;
    }
    softmax[t].lse_of_sums(sum, sum_t, p.lse_temperature, lse, lse_t);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      scale[h] = sum[h] > 0.f ? scales.v_global_scale * reciprocal_flush(sum[h]) : 0.f;
    }
    const RowPartial partial = gather_row_partial(o[t], scale, lse, lse_t);
    const RowSource source =
        row_source(p, plan, warpgroup, head_chunk, kDecodeRows * t + partial.row);
    if (!source.valid) continue;
    const int64_t token = plan.first_row + source.tile_token;
    const int64_t head = static_cast<int64_t>(kv_head) * p.group_size + source.head;
    if (p.num_splits > 1) {  // fp32 partials for merge.cu
      const int64_t partial_row = workspace_partial_row(p, plan.split, token, head);
      store_row_partial<kTemperatureLse>(partial, p.partial_out + partial_row * kHeadDim,
                                         p.partial_lse + partial_row,
                                         p.partial_lse_t + partial_row);
      continue;
    }
    Element* out = static_cast<Element*>(p.output.out) + p.output.out_offset(token, head) +
                   partial.column;
#pragma unroll
    for (int j = 0; j < 4; ++j) store4(out + kRowPartialStride * j, partial.value[j]);
    if (partial.sends_lse) {
      if (p.output.lse) p.output.lse[p.output.lse_offset(token, head)] = partial.lse;
      if (kTemperatureLse) p.output.lse_t[p.output.lse_t_offset(token, head)] = partial.lse_t;
    }
  }
}

}  // namespace flashmsa::sm90
