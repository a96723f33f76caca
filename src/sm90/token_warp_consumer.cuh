// A consumer warp of the fp8 prefill kernel: each warp of the two consumer warpgroups computes one
// 16-row tile of its warpgroup's 64 rows (one token's 16 heads at MiniMax-M3's group, several
// tokens' heads at smaller groups), alone and only on the blocks its tokens selected, with
// mma.sync whose fp8 K and V operands are converted in registers on their way into the products:
//   S = Q K^T    16 rows x 128 keys, K's fragments from the landed E4M3 rows (no rewrite);
//   P            the warp's own online softmax over its rows (no exchange between warps);
//   O += P V     16 rows x 128 dims, V's fragments gathered from four key rows at a time and
//                converted, P straight from S's accumulators.
// Why: the union tile's wgmma takes K and V from shared memory only, so fp8 stages are rewritten
// there as q's dtype before each block's first product; that rewrite's shared-memory traffic
// held fp8 prefill at half the bf16 speed (docs/performance.md, "What limits each case"). Here
// shared memory holds the E4M3 bytes as TMA landed them, each warp reads 32 KiB a block it
// selected, and a block no row of a warp selected costs that warp nothing but its barriers; the
// union tile computed every block for all 64 rows of a warpgroup (1.5-3.5x the useful work on
// MiniMax-M3's selections). The rings are compact (16 KiB stages, Smem::compact_k), so twice the
// blocks are resident and warps whose tokens chose different blocks work at once. What bounds it
// is the conversions (each warp converts all of every block it computes, two integer-pipe
// instructions a pair of values): without them the same kernel ran 2.1x as fast
// (docs/performance.md, "fp8 prefill by token warps").
// A thread holds S and O of rows lane / 4 and lane / 4 + 8 of its warp's 16: S as OnlineSoftmax
// lays 128 keys out, O as TokenWarpOutput below.
#pragma once

#include <stdint.h>

#include "sm90/decode_consumer.cuh"
#include "sm90/kernel_traits.h"
#include "sm90/kv_convert.cuh"
#include "sm90/mma.cuh"
#include "sm90/nvfp4_convert.cuh"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/ptx.cuh"
#include "sm90/softmax.cuh"
#include "sm90/split_combine.cuh"
#include "sm90/token_scales.cuh"

namespace flashmsa::sm90 {

constexpr int kBlockScores = 4 * (kBlockKeys / 8);  // a thread's S of one block: 64
constexpr int kValueTiles = kHeadDim / 8;            // n-tiles of O: 16

// A thread's O, in OnlineSoftmax's accumulator order: o[4i + 2h + c] at row lane / 4 + 8h, dim
// 32 (lane % 4) + 16c + i. V's fragments are gathered 16 dims of one key at a time (a lane's
// 16-byte chunk), so tile i's column n is dim 16n + i, and a lane's accumulators cover 32
// consecutive dims of each of its rows.
using TokenWarpOutput = float[4 * kValueTiles];

// A compact stage's 128 E4M3 rows of 128 bytes, 128B-swizzled as TMA lands them: the 16 bytes
// of chunk `chunk` of row `row`.
__device__ __forceinline__ uint4 fp8_chunk(const uint8_t* stage, int row, int chunk) {
  return *reinterpret_cast<const uint4*>(stage + row * 128 + ((chunk ^ (row % 8)) * 16));
}

// S (the warp's 16 rows x the block's 128 keys) = Q K^T, s[4j + 2h + c] at row lane / 4 + 8h,
// key 8j + 2 (lane % 4) + c.
template <typename Element>
__device__ __forceinline__ void token_warp_scores(const uint32_t (&q)[kDimSteps][4],
                                                  const uint8_t* k_stage,
                                                  float (&s)[kBlockScores]) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, l = lane % 4;
#pragma unroll
  for (int i = 0; i < kBlockScores; ++i) s[i] = 0.f;
#pragma unroll
  for (int a = 0; a < 2; ++a) {
#pragma unroll
    for (int j = 0; j < kBlockKeys / 8; ++j) {
      const uint4 chunk = fp8_chunk(k_stage, 8 * j + g, 2 * l + a);
      const uint32_t words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        // Bytes 0, 1 then 2, 3, each followed by its sign (fp16 too: integer instructions
        // rather than the conversion unit, e4m3_signed_pair).
        mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&s[4 * j]), q[4 * a + e],
                              e4m3_signed_pair<Element>(byte_permute(words[e], 0u, 0x9180u)),
                              e4m3_signed_pair<Element>(byte_permute(words[e], 0u, 0xb3a2u)));
      }
    }
  }
}

// O += P V over the block's 128 keys, P (A fragments in S's accumulator order) from
// OnlineSoftmax::update. K-step s's B fragments of lane (g, l) are keys 16s + 2l, + 1 and
// 16s + 8 + 2l, + 1 of dims 16g .. 16g + 15: four 16-byte reads (four rows of one k-step: 512
// bytes, four wavefronts), then each fragment register is one byte of two rows, each followed
// by its sign, by one byte permute, then converted (e4m3_signed_pair). Garbage bytes past the
// sequence end convert to finite values (kv_convert.cuh), which P's zeros there cancel.
template <typename Element>
__device__ __forceinline__ void token_warp_values(const uint32_t (&p)[kBlockScores / 2],
                                                  const uint8_t* v_stage, TokenWarpOutput& o) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, l = lane % 4;
#pragma unroll
  for (int step = 0; step < kKeySteps; ++step) {
    const uint32_t a[4] = {p[4 * step], p[4 * step + 1], p[4 * step + 2], p[4 * step + 3]};
    uint32_t rows[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const uint4 chunk = fp8_chunk(v_stage, 16 * step + 8 * (r / 2) + 2 * l + r % 2, g);
      rows[r][0] = chunk.x;
      rows[r][1] = chunk.y;
      rows[r][2] = chunk.z;
      rows[r][3] = chunk.w;
    }
#pragma unroll
    for (int i = 0; i < kValueTiles; ++i) {
      const int word = i / 4, byte = i % 4;
      // Byte `byte` of the first row, its sign, the second row's byte, its sign.
      const uint32_t selector = byte | (8 + byte) << 4 | (4 + byte) << 8 | (12 + byte) << 12;
      const uint32_t b0 =
          e4m3_signed_pair<Element>(byte_permute(rows[0][word], rows[1][word], selector));
      const uint32_t b1 =
          e4m3_signed_pair<Element>(byte_permute(rows[2][word], rows[3][word], selector));
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&o[4 * i]), a, b0, b1);
    }
  }
}

// NVFP4 stages (kNvfp4): 128 key rows of 64 packed bytes, unswizzled (a warp's 16-byte reads
// of eight consecutive rows, or of 8 bytes from four rows, cover whole rows), and the block's
// scales staged beside them (producer.cuh: stage_scales_beside_blocks).
// S = Q K^T as token_warp_scores: lane (g, l) reads bytes 16l .. 16l + 15 of key 8j + g, dims
// 32l .. 32l + 31, which are exactly the dims load_token_warp_queries gives k-steps 0..7 (k-step
// e: dims 32l + 4e .. + 3); word i holds k-steps 2i and 2i + 1, scale column 2l + i / 2 (the
// key's columns 2l, 2l + 1: one 16-bit read).
template <typename Element>
__device__ __forceinline__ void token_warp_scores_nvfp4(const uint32_t (&q)[kDimSteps][4],
                                                        const uint8_t* k_stage,
                                                        const uint8_t* k_scales,
                                                        float (&s)[kBlockScores]) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, l = lane % 4;
#pragma unroll
  for (int i = 0; i < kBlockScores; ++i) s[i] = 0.f;
#pragma unroll
  for (int j = 0; j < kBlockKeys / 8; ++j) {
    const int key = 8 * j + g;
    const uint4 row = *reinterpret_cast<const uint4*>(k_stage + key * kNvfp4RowBytes + 16 * l);
    const uint32_t words[4] = {row.x, row.y, row.z, row.w};
    const uint32_t multipliers = nvfp4_multipliers<Element>(
        *reinterpret_cast<const uint16_t*>(k_scales + key * kNvfp4ScaleCols + 2 * l));
    const uint32_t column_multipliers[2] = {broadcast_half<false>(multipliers),
                                            broadcast_half<true>(multipliers)};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t m = column_multipliers[i / 2];
      const Nvfp4Word<Element> w = convert_nvfp4_word<Element>(words[i], m, m);
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&s[4 * j]), q[2 * i], w.pair[0],
                            w.pair[1]);
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&s[4 * j]), q[2 * i + 1], w.pair[2],
                            w.pair[3]);
    }
  }
}

// O += P V as token_warp_values: k-step `step`'s B fragments of lane (g, l) are keys
// 16 step + 2l, + 1 (b0) and 16 step + 8 + 2l, + 1 (b1) of dims 16g .. 16g + 15, 8 bytes of
// each of the four rows (scale column g of two keys, staged linear or, from page-local planes,
// in token-quad order: quad_order); byte j of a row pair interleaved gives tiles 2j and 2j + 1
// of its word.
template <typename Element>
__device__ __forceinline__ void token_warp_values_nvfp4(const uint32_t (&p)[kBlockScores / 2],
                                                        const uint8_t* v_stage,
                                                        const uint8_t* v_scales,
                                                        bool quad_order, TokenWarpOutput& o) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, l = lane % 4;
  // Column g of keys 2l, 2l + 1 (and 8 + 2l, 9 + 2l) of a 16-key step: side by side in
  // token-quad order (quad l / 2, byte 4g + 2 (l % 2)), 8 bytes apart in the linear one.
  auto key_pair_scales = [&](int key) -> uint32_t {
    if (quad_order) {
      return *reinterpret_cast<const uint16_t*>(v_scales + (key / 4) * 32 + 4 * g + key % 4);
    }
    return v_scales[key * kNvfp4ScaleCols + g] |
           static_cast<uint32_t>(v_scales[(key + 1) * kNvfp4ScaleCols + g]) << 8;
  };
#pragma unroll
  for (int step = 0; step < kKeySteps; ++step) {
    const uint32_t a[4] = {p[4 * step], p[4 * step + 1], p[4 * step + 2], p[4 * step + 3]};
    uint2 rows[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int key = 16 * step + 8 * (r / 2) + 2 * l + r % 2;
      rows[r] = *reinterpret_cast<const uint2*>(v_stage + key * kNvfp4RowBytes + 8 * g);
    }
    const uint32_t low_keys = nvfp4_multipliers<Element>(key_pair_scales(16 * step + 2 * l));
    const uint32_t high_keys =
        nvfp4_multipliers<Element>(key_pair_scales(16 * step + 8 + 2 * l));
#pragma unroll
    for (int word = 0; word < 2; ++word) {
      const uint32_t r0 = word ? rows[0].y : rows[0].x, r1 = word ? rows[1].y : rows[1].x;
      const uint32_t r2 = word ? rows[2].y : rows[2].x, r3 = word ? rows[3].y : rows[3].x;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t selector = j | (4 + j) << 4;
        uint32_t b0_even, b0_odd, b1_even, b1_odd;
        convert_nvfp4_row_pairs<Element>(byte_permute(r0, r1, selector), low_keys, b0_even,
                                         b0_odd);
        convert_nvfp4_row_pairs<Element>(byte_permute(r2, r3, selector), high_keys, b1_even,
                                         b1_odd);
        const int tile = 8 * word + 2 * j;
        mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&o[4 * tile]), a, b0_even,
                              b1_even);
        mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&o[4 * tile + 4]), a, b0_odd,
                              b1_odd);
      }
    }
  }
}

// Consumer warp w of warpgroup `warpgroup` (both run this, each warp on its own): rows
// 16w .. 16w + 15 of the warpgroup's 64. Tiles of any size (a tile of at most
// tokens_per_warpgroup tokens leaves warpgroup 1's rows empty).
template <typename Element, bool kTemperatureLse, KvFormat kKv>
__device__ inline void consume_token_warps(const AttentionParams& p, const Smem& smem,
                                           const TilePlan& plan, int kv_head, int head_chunk) {
  const int warpgroup = threadIdx.x / 128 - 1;
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int first_row = kDecodeRows * warp;  // of the warpgroup's Q buffer
  SmemHeader& header = smem.header();

  int row_token[2], key_limit[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const RowSource source =
        row_source(p, plan, warpgroup, head_chunk, first_row + lane / 4 + 8 * h);
    row_token[h] = source.valid ? source.tile_token : -1;
    key_limit[h] = source.valid ? smem.token_key_limit()[source.tile_token] : 0;
  }
  uint32_t q[kDimSteps][4];
  load_token_warp_queries(smem.q(warpgroup), first_row, q);
  const GlobalScales scales = global_scales(p);
  constexpr bool kTokenScales = has_token_scales(kKv);
  constexpr bool kNvfp4 = is_nvfp4(kKv);
  constexpr uint32_t kSlotBytes = landed_tile_bytes(kKv);
  const TokenScaleRows token_scales = token_scale_rows(p, kv_head);
  OnlineSoftmax<kTemperatureLse> softmax;
  softmax.init();
  TokenWarpOutput o;
#pragma unroll
  for (int i = 0; i < 4 * kValueTiles; ++i) o[i] = 0.f;

  const int num_stages = p.smem_layout.num_stages;
  RingCursor ring;
  for (int u = plan.slice_begin; u < plan.slice_end; ++u, ring.advance(num_stages)) {
    const int stage = ring.stage;
    const uint32_t phase = ring.phase;
    const uint32_t* selected_by = smem.token_mask(u);
    const int block_first_key = smem.union_blocks()[u] * kBlockKeys;
    int visible[2];
    bool sees_any = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int token = row_token[h];
      const bool selected = token >= 0 && ((selected_by[token / 32] >> (token % 32)) & 1);
      visible[h] = selected ? min(max(key_limit[h] - block_first_key, 0), kBlockKeys) : 0;
      sees_any |= visible[h] > 0;
    }
    const bool reads = __any_sync(0xffffffffu, sees_any);
    mbarrier_wait(&header.k_full[stage], phase);
    if (!reads) {
      // Arrive on both rings in order, without reading: V's arrival waits for V(u) to land, so
      // it cannot count toward the phase of the block this stage held before.
      mbarrier_arrive(&header.k_empty[stage]);
      mbarrier_wait(&header.v_full[stage], phase);
      mbarrier_arrive(&header.v_empty[stage]);
      continue;
    }
    float s[kBlockScores];
    if constexpr (kNvfp4) {
      token_warp_scores_nvfp4<Element>(q, smem.compact_k(stage, kSlotBytes),
                                       smem.staged_block_scales(stage, false), s);
    } else {
      token_warp_scores<Element>(q, smem.compact_k(stage, kSlotBytes), s);
    }
    // Per-token scales, staged beside the block (token_scales.cuh): K's read before its stage
    // is released.
    if (kTokenScales && token_scales.k.scales != nullptr) {
      scale_columns_from_stage(s, smem.staged_token_scales(stage, false));
    }
    release_stage(&header.k_empty[stage]);
    uint32_t probabilities[kBlockScores / 2];
    float correction[2];
    if constexpr (kTokenScales) {
      softmax.template update<Element>(
          s, visible, scales.scale_log2, p.lse_temperature, probabilities, correction,
          [&](float(&x)[kBlockScores]) {
            if (token_scales.v.scales != nullptr) {
              mbarrier_wait(&header.v_full[stage], phase);  // V's scales land with V
              scale_columns_from_stage(x, smem.staged_token_scales(stage, true));
            }
          });
    } else {
      softmax.template update<Element>(s, visible, scales.scale_log2, p.lse_temperature,
                                       probabilities, correction);
    }
    OnlineSoftmax<kTemperatureLse>::rescale(o, correction);
    mbarrier_wait(&header.v_full[stage], phase);
    if constexpr (kNvfp4) {
      token_warp_values_nvfp4<Element>(probabilities, smem.compact_v(stage, kSlotBytes),
                                       smem.staged_block_scales(stage, true),
                                       p.nvfp4_page_local != 0, o);
    } else {
      token_warp_values<Element>(probabilities, smem.compact_v(stage, kSlotBytes), o);
    }
    release_stage(&header.v_empty[stage]);
  }

  // Epilogue: each row's 128 dims are the quad's four lanes' 32 (normalised; fp32 partials to
  // the workspace with a KV split).
  float sum[2], sum_t[2], lse[2], lse_t[2];
  softmax.quad_sums(sum, sum_t);
  softmax.lse_of_sums(sum, sum_t, p.lse_temperature, lse, lse_t);
  const int first_dim = 32 * (lane % 4);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const RowSource source =
        row_source(p, plan, warpgroup, head_chunk, first_row + lane / 4 + 8 * h);
    if (!source.valid) continue;
    const float scale = sum[h] > 0.f ? scales.v_global_scale * reciprocal_flush(sum[h]) : 0.f;
    const int64_t token = plan.first_row + source.tile_token;
    const int64_t head = static_cast<int64_t>(kv_head) * p.group_size + source.head;
    // Dims first_dim + 16c + i, i = 0..15, in groups of four.
    auto quad = [&](int c, int i0) {
      const int first = 4 * i0 + 2 * h + c;
      return make_float4(o[first] * scale, o[first + 4] * scale, o[first + 8] * scale,
                         o[first + 12] * scale);
    };
    if (p.num_splits > 1) {  // fp32 partials for merge.cu
      const int64_t partial_row = workspace_partial_row(p, plan.split, token, head);
      float* row = p.partial_out + partial_row * kHeadDim + first_dim;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
#pragma unroll
        for (int i0 = 0; i0 < 16; i0 += 4) {
          *reinterpret_cast<float4*>(row + 16 * c + i0) = quad(c, i0);
        }
      }
      if (lane % 4 == 0) {
        p.partial_lse[partial_row] = lse[h];
        if (kTemperatureLse) p.partial_lse_t[partial_row] = lse_t[h];
      }
      continue;
    }
    Element* out =
        static_cast<Element*>(p.output.out) + p.output.out_offset(token, head) + first_dim;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
      for (int i0 = 0; i0 < 16; i0 += 4) store4(out + 16 * c + i0, quad(c, i0));
    }
    if (lane % 4 == 0) {
      if (p.output.lse) p.output.lse[p.output.lse_offset(token, head)] = lse[h];
      if (kTemperatureLse) p.output.lse_t[p.output.lse_t_offset(token, head)] = lse_t[h];
    }
  }
}

}  // namespace flashmsa::sm90
