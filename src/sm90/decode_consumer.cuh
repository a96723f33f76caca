// The consumer warpgroup of a one-token decode tile: one query token, at most 16 query heads of
// one KV head (MiniMax-M3: 16). Its rows are one m16 row tile, so the warpgroup runs warp-level
// mma.sync instead of one 64-row wgmma tile of which 48 rows are empty. The four warps split
// each block's 128 keys for S and its 128 head dims for O:
//   S = Q K^T   warp w: keys 32w .. 32w + 31 (32 mma, K fragments by ldmatrix from the
//               swizzled stage); its row maxima go to shared memory, and after a barrier every
//               warp takes the block's maxima over all four, so the four running maxima agree;
//   P           warp w's probabilities of its keys (the A fragments of two k-steps of P V) go
//               to shared memory; after a second barrier every warp has P of all 128 keys;
//   O += P V    warp w: head dims 32w .. 32w + 31 over all 128 keys (32 mma, V fragments by
//               transposed ldmatrix).
// At the end the warps add their row sums through shared memory, and each warp's O is its
// quarter of the CTA's output rows: nothing is merged. The earlier split (each warp all 128
// dims of its 32 keys) ended with a merge of four 8 KiB partials through bank-conflicted
// shared memory that took 1.6 us of batch 1's 8.0.
// The KV split's CTAs are then reduced through the cluster (cluster_reduce.cuh) or through
// the workspace and the merge kernel (merge.cu), or the output is written directly. Decode
// moves K and V once through the SM: what limits it is the latency of each block's chain, not
// tensor throughput.
#pragma once

#include <math.h>
#include <stdint.h>

#include "sm90/cluster_reduce.cuh"
#include "sm90/consumer.cuh"
#include "sm90/kernel_traits.h"
#include "sm90/kv_convert.cuh"
#include "sm90/mma.cuh"
#include "sm90/nvfp4_convert.cuh"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/ptx.cuh"
#include "sm90/softmax.cuh"
#include "sm90/split_combine.cuh"
#include "sm90/timeline.cuh"
#include "sm90/token_scales.cuh"

namespace flashmsa::sm90 {

constexpr int kKeysPerWarp = kBlockKeys / 4;       // 32: S of warp w
constexpr int kWarpScoreTiles = kKeysPerWarp / 8;  // n-tiles of 8 keys
constexpr int kDimSteps = kHeadDim / 16;           // k-steps of S = Q K^T
constexpr int kDimsPerWarp = kHeadDim / 4;         // 32: O of warp w
constexpr int kKeySteps = kBlockKeys / 16;         // k-steps of O += P V
constexpr int kDimChunksPerWarp = kDimsPerWarp / 8;  // 16-byte chunks of a V row

// P of one 16-row tile over a block's 128 keys as A fragments, [k-step][lane]: what the four warps
// exchange for O += P V (share_probabilities, warp_values).
using ProbabilityFragments = uint4[kKeySteps][32];

// A thread's share of its warp's O: 16 rows x 32 dims, element 4 * j + 2 * h + c at row
// lane / 4 + 8 * h, dim 32 * warp + 8 * j + 2 * (lane % 4) + c.
using WarpOutput = float[4 * kDimsPerWarp / 8];
static_assert(kDimsPerWarp == 32,
              "cluster_reduce.cuh: row_partial_column strides the warps by 32 dims");

// What the four warps exchange, in the Q buffer's rows 16..63 (a one-token tile loads only rows
// 0..15; they are idle once Q is loaded).
struct OneTokenExchange {
  ProbabilityFragments probabilities;  // k-step s's A fragment of lane l (warp s / 2 writes it)
  float4 block_max[kDecodeRows];       // [row]: the four warps' maxima of the row in the block
  float4 row_sum[kDecodeRows];         // [row]: the four warps' sums, at the end
  float4 row_sum_t[kDecodeRows];
};
constexpr uint32_t kExchangeOffset = kDecodeRows * 128;  // past Q's rows in the first panel
static_assert(kExchangeOffset + sizeof(OneTokenExchange) <= kQPanelBytes,
              "the warps' exchange must fit beside the token's Q rows");

__device__ __forceinline__ OneTokenExchange& one_token_exchange(const Smem& smem) {
  return *reinterpret_cast<OneTokenExchange*>(smem.q(0) + kExchangeOffset);
}

// Launch-uniform per CTA: whether the tile runs this consumer.
__device__ __forceinline__ bool runs_one_token_consumer(const AttentionParams& p,
                                                        const TilePlan& plan) {
  return plan.num_tokens == 1 && p.heads_per_chunk <= kDecodeRows;
}

// S (16 rows x this warp's 32 keys) = Q K^T, element 4 * j + 2 * h + c at row lane / 4 + 8 * h,
// key 8 * j + 2 * (lane % 4) + c of the warp's keys. Q rows 0..15 (the token's heads; rows past
// the group are zero) come from the swizzled Q buffer, one A fragment per k-step: read again for
// every block rather than held in 32 registers across the loop.
template <typename Element>
__device__ __forceinline__ void warp_scores(uint32_t q_tile, uint32_t k_tile, int first_key,
                                            float (&s)[4 * kWarpScoreTiles]) {
  const int lane = threadIdx.x % 32;
  const int matrix = lane / 8;
  const int q_row = (matrix % 2) * 8 + lane % 8;
#pragma unroll
  for (int i = 0; i < 4 * kWarpScoreTiles; ++i) s[i] = 0.f;
#pragma unroll
  for (int step = 0; step < kDimSteps; ++step) {
    uint32_t q[4];
    ldmatrix_x4(q, swizzled_chunk(q_tile, q_row, 2 * step + matrix / 2, kQPanelBytes));
#pragma unroll
    for (int pair = 0; pair < kWarpScoreTiles / 2; ++pair) {
      // Matrices: keys of n-tile 2 * pair (dims low, high), then of n-tile 2 * pair + 1.
      const int key = first_key + 8 * (2 * pair + matrix / 2) + lane % 8;
      uint32_t b[4];
      ldmatrix_x4(b, swizzled_chunk(k_tile, key, 2 * step + matrix % 2, kKvPanelBytes));
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&s[8 * pair]), q, b[0], b[1]);
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&s[8 * pair + 4]), q, b[2], b[3]);
    }
  }
}

// warp_scores on fp8 K as landed (rows of 128 E4M3 bytes, 128B-swizzled: a compact stage, or
// the upper half of a full one), converted in registers on the way into the products: no
// rewrite of the stage. Each k-step of 16 dims takes them in a permuted order, the same in A and
// B, so the dot products are those of the natural order: lane (g, l) reads one word, dims
// 16 step + 4l .. + 3 of key g of each n-tile, whose pairs (4l, 4l + 1) and (4l + 2, 4l + 3) are
// its B fragment's k = 2l, 2l + 1 and 2l + 8, 2l + 9; its A fragment holds Q's same dims of rows
// g and g + 8 (two 8-byte reads of the swizzled Q buffer). Each pair is converted by one signed
// byte permute and e4m3_signed_pair (kv_convert.cuh).
template <typename Element>
__device__ __forceinline__ void warp_scores_fp8(const uint8_t* q_tile, const uint8_t* fp8_rows,
                                                int first_key, float (&s)[4 * kWarpScoreTiles]) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, l = lane % 4;
#pragma unroll
  for (int i = 0; i < 4 * kWarpScoreTiles; ++i) s[i] = 0.f;
#pragma unroll
  for (int step = 0; step < kDimSteps; ++step) {
    const int q_chunk = 2 * step + l / 2, q_byte = (l % 2) * 8;  // dims 16 step + 4l
    const uint2 row_g = *reinterpret_cast<const uint2*>(
        q_tile + swizzled_chunk_offset(g, q_chunk, kQPanelBytes) + q_byte);
    const uint2 row_g8 = *reinterpret_cast<const uint2*>(
        q_tile + swizzled_chunk_offset(g + 8, q_chunk, kQPanelBytes) + q_byte);
    const uint32_t a[4] = {row_g.x, row_g8.x, row_g.y, row_g8.y};
#pragma unroll
    for (int tile = 0; tile < kWarpScoreTiles; ++tile) {
      const int key = first_key + 8 * tile + g;
      const uint32_t word = *reinterpret_cast<const uint32_t*>(
          fp8_rows + key * 128 + ((step ^ (key % 8)) * 16) + 4 * l);
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&s[4 * tile]), a,
                            e4m3_signed_pair<Element>(byte_permute(word, 0u, 0x9180u)),
                            e4m3_signed_pair<Element>(byte_permute(word, 0u, 0xb3a2u)));
    }
  }
}

// Q's A fragments of a warp's 16-row tile for the 8 k-steps of S, read once per tile (the
// token-warp consumer's, and the one-token consumer's for NVFP4). K-step
// 4a + e takes lane l's dims 16 (2l + a) + 4e .. + 3 (the pairs are its k = 2l, 2l + 1 and
// 2l + 8, 2l + 9), so that each key row's lane reads 16 consecutive fp8 bytes for four k-steps:
// chunks 2l + a of rows g and g + 1 land in distinct banks under the 128B swizzle.
__device__ __forceinline__ void load_token_warp_queries(const uint8_t* q_tile, int first_row,
                                                        uint32_t (&q)[kDimSteps][4]) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, l = lane % 4;
#pragma unroll
  for (int a = 0; a < 2; ++a) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int chunk = 2 * (2 * l + a) + e / 2, byte = (e % 2) * 8;
      const uint2 row_g = *reinterpret_cast<const uint2*>(
          q_tile + swizzled_chunk_offset(first_row + g, chunk, kQPanelBytes) + byte);
      const uint2 row_g8 = *reinterpret_cast<const uint2*>(
          q_tile + swizzled_chunk_offset(first_row + g + 8, chunk, kQPanelBytes) + byte);
      q[4 * a + e][0] = row_g.x;
      q[4 * a + e][1] = row_g8.x;
      q[4 * a + e][2] = row_g.y;
      q[4 * a + e][3] = row_g8.y;
    }
  }
}

// warp_scores on an NVFP4 stage (rows of 64 packed bytes, unswizzled, where the block landed),
// converted in registers: Q's k-steps as load_token_warp_queries orders them (k-step e: dims
// 32l + 4e .. + 3 of lane l), so that lane (g, l) reads bytes 16l .. 16l + 15 of each of its
// keys (one 16-byte read for all eight k-steps; eight consecutive rows a read, conflict-free),
// whose scale columns are 2l and 2l + 1. scales[tile / 2]: the columns' scales of key
// first_key + 8 tile + g (16 bits a key, read_warp_key_scales).
template <typename Element>
__device__ __forceinline__ void warp_scores_nvfp4(const uint32_t (&q)[kDimSteps][4],
                                                  const uint8_t* k_rows, int first_key,
                                                  const uint32_t (&scales)[2],
                                                  float (&s)[4 * kWarpScoreTiles]) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, l = lane % 4;
#pragma unroll
  for (int i = 0; i < 4 * kWarpScoreTiles; ++i) s[i] = 0.f;
#pragma unroll
  for (int tile = 0; tile < kWarpScoreTiles; ++tile) {
    const int key = first_key + 8 * tile + g;
    const uint4 row = *reinterpret_cast<const uint4*>(k_rows + key * kNvfp4RowBytes + 16 * l);
    const uint32_t words[4] = {row.x, row.y, row.z, row.w};
    const uint32_t multipliers =
        nvfp4_multipliers<Element>(scales[tile / 2] >> (16 * (tile % 2)));
    const uint32_t column_multipliers[2] = {broadcast_half<false>(multipliers),
                                            broadcast_half<true>(multipliers)};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t m = column_multipliers[i / 2];
      const Nvfp4Word<Element> w = convert_nvfp4_word<Element>(words[i], m, m);
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&s[4 * tile]), q[2 * i], w.pair[0],
                            w.pair[1]);
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&s[4 * tile]), q[2 * i + 1],
                            w.pair[2], w.pair[3]);
    }
  }
}

// This warp's keys' K scales from the block's staged copy (stage_operand_scales: byte
// key * 8 + col): scales[pair] holds columns 2 (lane % 4) and + 1 of key
// first_key + 16 pair + lane / 4 in bits 0-15 and of that key + 8 in bits 16-31.
__device__ __forceinline__ void read_warp_key_scales(const uint8_t* staged, int first_key,
                                                     uint32_t (&scales)[2]) {
  const int lane = threadIdx.x % 32;
  auto columns = [&](int key) -> uint32_t {
    return *reinterpret_cast<const uint16_t*>(staged + key * kNvfp4ScaleCols + 2 * (lane % 4));
  };
#pragma unroll
  for (int pair = 0; pair < 2; ++pair) {
    const int key = first_key + 16 * pair + lane / 4;
    scales[pair] = columns(key) | columns(key + 8) << 16;
  }
}

// Per-row values of the four warps, slots[row][warp]: this warp's values of the thread's two
// rows in (the quad's first lane writes them); after a barrier, row_values reads all four.
__device__ __forceinline__ void post_row_values(float4* slots, const float (&value)[2]) {
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  if (lane % 4 == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      reinterpret_cast<float*>(&slots[lane / 4 + 8 * h])[warp] = value[h];
    }
  }
}
__device__ __forceinline__ float4 row_values(const float4* slots, int h) {
  const int lane = threadIdx.x % 32;
  return slots[lane / 4 + 8 * h];
}
// The four warps' values of row h: their max, and their sum in a fixed order.
__device__ __forceinline__ float max_of_row_values(const float4* slots, int h) {
  const float4 m = row_values(slots, h);
  return fmaxf(fmaxf(m.x, m.y), fmaxf(m.z, m.w));
}
__device__ __forceinline__ float sum_of_row_values(const float4* slots, int h) {
  const float4 s = row_values(slots, h);
  return (s.x + s.y) + (s.z + s.w);
}

// The block's row maxima over all four warps' keys, from each warp's over its own (quad-reduced
// by scale_and_mask_row and max_over_row_quad): every warp reads the same four values in the
// same order, so the running maxima, corrections and probabilities of the four warps share one
// scale.
__device__ __forceinline__ void share_block_max(OneTokenExchange& exchange, float (&block_max)[2]) {
  post_row_values(exchange.block_max, block_max);
  named_barrier_sync(kConsumerBarrier, 128);
#pragma unroll
  for (int h = 0; h < 2; ++h) block_max[h] = max_of_row_values(exchange.block_max, h);
}

// This warp's probabilities (A fragments of k-steps 2w and 2w + 1, in S's accumulator order)
// for every warp's O += P V: lane l's fragment of a k-step is lane l's in every warp.
__device__ __forceinline__ void share_probabilities(ProbabilityFragments& fragments,
                                                    const uint32_t (&p)[2 * kWarpScoreTiles]) {
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int step = 0; step < kKeysPerWarp / 16; ++step) {
    fragments[2 * warp + step][lane] =
        make_uint4(p[4 * step], p[4 * step + 1], p[4 * step + 2], p[4 * step + 3]);
  }
}

// O (16 rows x this warp's 32 dims) += P V over the block's 128 keys, P from share_probabilities.
template <typename Element>
__device__ __forceinline__ void warp_values(const ProbabilityFragments& fragments,
                                            uint32_t v_tile, int first_chunk, WarpOutput& o) {
  const int lane = threadIdx.x % 32;
  const int matrix = lane / 8;
#pragma unroll
  for (int step = 0; step < kKeySteps; ++step) {
    const uint4 fragment = fragments[step][lane];
    const uint32_t a[4] = {fragment.x, fragment.y, fragment.z, fragment.w};
    const int key = 16 * step + 8 * (matrix % 2) + lane % 8;
#pragma unroll
    for (int pair = 0; pair < kDimChunksPerWarp / 2; ++pair) {
      // Matrices: dims of n-tile 2 * pair (keys low, high), then of n-tile 2 * pair + 1.
      uint32_t b[4];
      ldmatrix_x4_transposed(
          b, swizzled_chunk(v_tile, key, first_chunk + 2 * pair + matrix / 2, kKvPanelBytes));
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&o[8 * pair]), a, b[0], b[1]);
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&o[8 * pair + 4]), a, b[2], b[3]);
    }
  }
}

// O += P V on fp8 V as landed (128-byte rows, 128B-swizzled), converted in registers: warp w's
// dims are fp8 chunks 2w and 2w + 1 of every row. A transposed ldmatrix of a chunk's 16 bytes
// as eight 16-bit columns gives lane (g, l) keys 2l and 2l + 1 (and 2l + 8, 2l + 9 from the next
// matrix) of the byte pair 2g, 2g + 1: one signed byte permute makes the pair of keys of byte 2g
// (n-tile `even`) and another that of byte 2g + 1 (n-tile `odd`), so n-tile 2c + parity's column
// n is dim 32w + 16c + 2n + parity, not WarpOutput's order (fp8_values_in_natural_order puts
// them there at the end). Bytes past the request's end convert to finite values
// (e4m3_signed_pair), which P's zeros there cancel: no tail to clear.
template <typename Element>
__device__ __forceinline__ void warp_values_fp8(const ProbabilityFragments& fragments,
                                                uint32_t fp8_rows, int warp, WarpOutput& o) {
  const int lane = threadIdx.x % 32;
  const int matrix = lane / 8;
#pragma unroll
  for (int step = 0; step < kKeySteps; ++step) {
    const uint4 fragment = fragments[step][lane];
    const uint32_t a[4] = {fragment.x, fragment.y, fragment.z, fragment.w};
    // Matrices: keys low, high of chunk 2w, then of chunk 2w + 1.
    const int key = 16 * step + 8 * (matrix % 2) + lane % 8;
    uint32_t b[4];
    ldmatrix_x4_transposed(b, swizzled_chunk(fp8_rows, key, 2 * warp + matrix / 2, kKvPanelBytes));
#pragma unroll
    for (int chunk = 0; chunk < 2; ++chunk) {
      const uint32_t low = b[2 * chunk], high = b[2 * chunk + 1];
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&o[8 * chunk]), a,
                            e4m3_signed_pair<Element>(byte_permute(low, 0u, 0xa280u)),
                            e4m3_signed_pair<Element>(byte_permute(high, 0u, 0xa280u)));
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&o[8 * chunk + 4]), a,
                            e4m3_signed_pair<Element>(byte_permute(low, 0u, 0xb391u)),
                            e4m3_signed_pair<Element>(byte_permute(high, 0u, 0xb391u)));
    }
  }
}

// warp_values_fp8's O in WarpOutput's order (n-tile j's column n: dim 32w + 8j + n). Element
// (j, h, c) of lane (g, l), dim 8j + 2l + c of the warp's, is element (n-tile 2 (j / 2) + c,
// h, l % 2) of lane (g, 2 (j % 2) + l / 2); the two lanes of a source that read it want
// different elements, so each value takes two shuffles. Once, after the loop.
__device__ __forceinline__ void fp8_values_in_natural_order(WarpOutput& o) {
  const int lane = threadIdx.x % 32;
  const int l = lane % 4;
  float natural[4 * kDimsPerWarp / 8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int source = (lane & ~3) | (2 * (j % 2) + l / 2);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int element = 4 * (2 * (j / 2) + c) + 2 * h;
        const float even = __shfl_sync(0xffffffffu, o[element], source);
        const float odd = __shfl_sync(0xffffffffu, o[element + 1], source);
        natural[4 * j + 2 * h + c] = l % 2 ? odd : even;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4 * kDimsPerWarp / 8; ++i) o[i] = natural[i];
}

// V rows at or past `first_invalid_key` (past the request's end: may hold anything, NaN
// included, and 0 * NaN is NaN) become zero in this warp's dims, the ones it reads; the fence
// orders the stores before the next TMA write into the stage.
__device__ __forceinline__ void zero_warp_value_tail(uint8_t* v_tile, int first_invalid_key,
                                                     int first_chunk) {
  const int lane = threadIdx.x % 32;
  for (int c = lane; c < (kBlockKeys - first_invalid_key) * kDimChunksPerWarp; c += 32) {
    const int key = first_invalid_key + c / kDimChunksPerWarp;
    const int chunk = first_chunk + c % kDimChunksPerWarp;
    *reinterpret_cast<uint4*>(v_tile + swizzled_chunk_offset(key, chunk, kKvPanelBytes)) =
        make_uint4(0, 0, 0, 0);
  }
  fence_proxy_async_shared();
  __syncwarp();
}

// ldmatrix reads the stage through the generic proxy and the producer's next TMA writes it
// through the async proxy: the proxy fence orders this thread's reads before that write (the
// barrier alone does not; without it a graph replay differed from the eager call in 16 x 16
// output values of one tile, the footprint of one transposed V fragment read late).
__device__ __forceinline__ void release_stage(uint64_t* empty) {
  fence_proxy_async_shared();
  mbarrier_arrive(empty);
}

// The rows' complete sums from each warp's (over its keys); every warp reads the same values.
template <bool kTemperatureLse>
__device__ __forceinline__ void share_row_sums(OneTokenExchange& exchange, float (&sum)[2],
                                               float (&sum_t)[2]) {
  post_row_values(exchange.row_sum, sum);
  if (kTemperatureLse) post_row_values(exchange.row_sum_t, sum_t);
  named_barrier_sync(kConsumerBarrier, 128);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sum[h] = sum_of_row_values(exchange.row_sum, h);
    if (kTemperatureLse) sum_t[h] = sum_of_row_values(exchange.row_sum_t, h);
  }
}

// A thread's share of the CTA's normalised output, as 16-byte pieces: lanes of a quad pair up
// (xor 1) so that the even lane holds 4 consecutive dims of row lane / 4 and the odd lane 4 of
// row lane / 4 + 8, at dims 32w + 8j + 4 ((lane % 4) / 2) for n-tiles j = 0..3. Row h's LSEs
// are sent by warp 0's lane with lane % 4 == h.
__device__ __forceinline__ RowPartial gather_row_partial(const WarpOutput& o,
                                                         const float (&scale)[2],
                                                         const float (&lse)[2],
                                                         const float (&lse_t)[2]) {
  const int lane = threadIdx.x % 32;
  const bool keeps_row_0 = lane % 2 == 0;  // else row lane / 4 + 8 (no dynamic indexing:
                                            // it would put the registers in local memory)
  const float keep_scale = keeps_row_0 ? scale[0] : scale[1];
  const float give_scale = keeps_row_0 ? scale[1] : scale[0];
  RowPartial partial;
  partial.row = row_partial_row();
  partial.column = row_partial_column();
  partial.lse = keeps_row_0 ? lse[0] : lse[1];
  partial.lse_t = keeps_row_0 ? lse_t[0] : lse_t[1];
  partial.sends_lse = threadIdx.x % 128 < 32 && lane % 4 < 2;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    // Element 4j + 2h + c is row h's: even lanes send their row-1 pair, odd lanes their row-0.
    const float row0_x = o[4 * j], row0_y = o[4 * j + 1];
    const float row1_x = o[4 * j + 2], row1_y = o[4 * j + 3];
    const float got_x = __shfl_xor_sync(0xffffffffu, (keeps_row_0 ? row1_x : row0_x) * give_scale, 1);
    const float got_y = __shfl_xor_sync(0xffffffffu, (keeps_row_0 ? row1_y : row0_y) * give_scale, 1);
    partial.value[j] =
        keeps_row_0
            ? make_float4(row0_x * keep_scale, row0_y * keep_scale, got_x, got_y)
            : make_float4(got_x, got_y, row1_x * keep_scale, row1_y * keep_scale);
  }
  return partial;
}

// O += P V on NVFP4 V as landed (rows of 64 packed bytes), converted in registers: warp w's
// dims are bytes 16w .. 16w + 15 of every row (scale columns 2w, 2w + 1). A transposed ldmatrix
// of those 16 bytes as eight 16-bit columns gives lane (g, l) keys 2l and 2l + 1 (and 2l + 8,
// 2l + 9 from the next matrix) of the byte pair 2g, 2g + 1: dims 32w + 4g .. + 3, scale column
// 2w + g / 4. One permute interleaves byte j of the two keys, and one conversion
// (convert_nvfp4_row_pairs) makes both keys' pairs of dims 4g + 2j and 4g + 2j + 1, so n-tile t's
// column n is dim 32w + 4n + t, not WarpOutput's order (nvfp4_values_in_natural_order puts them
// there at the end). The keys' scales come from the staged copy: side by side in token-quad
// order, 8 bytes apart in the linear one (stage_operand_scales). Keys past the request's end
// have scale 0 and finite E2M1 values, so they convert to zeros.
template <typename Element>
__device__ __forceinline__ void warp_values_nvfp4(const ProbabilityFragments& fragments,
                                                  uint32_t v_rows, const uint8_t* v_scales,
                                                  bool quad_order, int warp, WarpOutput& o) {
  const int lane = threadIdx.x % 32;
  const int matrix = lane / 8;
  const int column = 2 * warp + (lane / 4) / 4;  // the scale column of this lane's dims
  auto key_pair_scales = [&](int key) -> uint32_t {  // keys key, key + 1 (key even)
    if (quad_order) {
      return *reinterpret_cast<const uint16_t*>(v_scales + (key / 4) * 32 + 4 * column + key % 4);
    }
    return v_scales[key * kNvfp4ScaleCols + column] |
           static_cast<uint32_t>(v_scales[(key + 1) * kNvfp4ScaleCols + column]) << 8;
  };
#pragma unroll
  for (int pair = 0; pair < kKeySteps / 2; ++pair) {
    // Matrices: keys low, high of k-step 2 pair, then of k-step 2 pair + 1.
    const int row = 32 * pair + 8 * matrix + lane % 8;
    uint32_t b[4];
    ldmatrix_x4_transposed(b, v_rows + row * kNvfp4RowBytes + 16 * warp);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int step = 2 * pair + half;
      const uint4 fragment = fragments[step][lane];
      const uint32_t a[4] = {fragment.x, fragment.y, fragment.z, fragment.w};
      const int first_key = 16 * step + 2 * (lane % 4);
      const uint32_t low_keys = nvfp4_multipliers<Element>(key_pair_scales(first_key));
      const uint32_t high_keys = nvfp4_multipliers<Element>(key_pair_scales(first_key + 8));
      const uint32_t low = b[2 * half], high = b[2 * half + 1];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        // Byte j of each key: bytes j and 2 + j of the word.
        const uint32_t selector = j | (2 + j) << 4;
        uint32_t b0_even, b0_odd, b1_even, b1_odd;
        convert_nvfp4_row_pairs<Element>(byte_permute(low, 0u, selector), low_keys, b0_even,
                                         b0_odd);
        convert_nvfp4_row_pairs<Element>(byte_permute(high, 0u, selector), high_keys, b1_even,
                                         b1_odd);
        mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&o[4 * (2 * j)]), a, b0_even,
                              b1_even);
        mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&o[4 * (2 * j + 1)]), a, b0_odd,
                              b1_odd);
      }
    }
  }
}

// warp_values_nvfp4's O in WarpOutput's order (n-tile j's column n: dim 32w + 8j + n). Element
// (j, h, c) of lane (g, l), dim 8j + 2l + c of the warp's, is element (n-tile 2 (l % 2) + c, h,
// l / 2) of lane (g, j); the four lanes of a quad read four different elements of it, so each
// value takes four shuffles. Once, after the loop.
__device__ __forceinline__ void nvfp4_values_in_natural_order(WarpOutput& o) {
  const int lane = threadIdx.x % 32;
  const int l = lane % 4;
  float natural[4 * kDimsPerWarp / 8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int source = (lane & ~3) | j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float value = 0.f;
#pragma unroll
        for (int want = 0; want < 4; ++want) {  // the reading lane's l
          const int element = 4 * (2 * (want % 2) + c) + 2 * h + want / 2;
          const float got = __shfl_sync(0xffffffffu, o[element], source);
          if (l == want) value = got;
        }
        natural[4 * j + 2 * h + c] = value;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4 * kDimsPerWarp / 8; ++i) o[i] = natural[i];
}

// kKv: how the stages hold K and V (fp8 and NVFP4: converted here, in registers, see above;
// kFp8TokenScaled: with per-token scales, token_scales.cuh).
// kCompactRings: converted formats land in stages of one box (the decode kernel's rings), else
// in the upper half of a full stage (the one-consumer prefill kernel's; NVFP4 never runs
// there).
template <typename Element, bool kTemperatureLse, KvFormat kKv = KvFormat::kNative,
          bool kCompactRings = false>
__device__ inline void consume_one_token(const AttentionParams& p, const Smem& smem,
                                         const TilePlan& plan, int kv_head, int head_chunk) {
  const int thread = threadIdx.x % 128;
  const int warp = thread / 32, lane = thread % 32;
  const int first_key = warp * kKeysPerWarp;              // of each block, for S
  const int first_chunk = warp * kDimChunksPerWarp;       // of each V row, for O
  SmemHeader& header = smem.header();
  OneTokenExchange& exchange = one_token_exchange(smem);

  // Rows lane / 4 and lane / 4 + 8 are heads of the tile's one token; rows past the group read
  // nothing (their Q rows are zero and their scores are masked).
  bool row_valid[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_valid[h] = row_source(p, plan, 0, head_chunk, lane / 4 + 8 * h).valid;
  }
  const int key_limit = smem.token_key_limit()[0];
  const GlobalScales scales = global_scales(p);
  constexpr bool kTokenScales = has_token_scales(kKv);
  const TokenScaleRows token_scales = token_scale_rows(p, kv_head);

  // NVFP4: Q's fragments held for the whole loop, in the order warp_scores_nvfp4 takes them.
  uint32_t q[kDimSteps][4];
  if constexpr (is_nvfp4(kKv)) load_token_warp_queries(smem.q(0), 0, q);

  OnlineSoftmax<kTemperatureLse> softmax;
  softmax.init();
  WarpOutput o;
#pragma unroll
  for (int i = 0; i < 4 * kDimsPerWarp / 8; ++i) o[i] = 0.f;

  // The reduction's addresses and destinations, while the first block is on its way.
  PushPlan<Element> push{};
  if (p.push_reduce) {
    push = prepare_push<Element, kTemperatureLse>(p, smem, plan, kv_head, head_chunk);
  }

  const int num_stages = p.smem_layout.num_stages;
  // Where a stage's fp8 K or V rows landed.
  auto landed_fp8 = [&](bool value, int stage) -> const uint8_t* {
    if constexpr (kCompactRings) {
      return value ? smem.compact_v(stage, kFp8TileBytes) : smem.compact_k(stage, kFp8TileBytes);
    } else {
      return (value ? smem.v(stage) : smem.k(stage)) + landing_offset(kKv);
    }
  };
  // The block's three phases. scores: S = Q K^T of this warp's keys from the landed K (its
  // per-token scales applied). softmax: the block's row maxima over the four warps, the
  // probabilities shared for every warp's P V, O rescaled; its first barrier also means every
  // warp has read the previous block's P. values: O += P V of this warp's dims.
  auto scores = [&](int stage, float (&s)[4 * kWarpScoreTiles]) {
    if constexpr (is_nvfp4(kKv)) {
      // The block's scales landed with it (the producer warp stages them: decode_kernel.cuh).
      uint32_t key_block_scales[2];
      read_warp_key_scales(smem.staged_block_scales(stage, false), first_key, key_block_scales);
      warp_scores_nvfp4<Element>(q, smem.compact_k(stage, kNvfp4TileBytes), first_key,
                                 key_block_scales, s);
    } else if constexpr (is_fp8(kKv)) {
      warp_scores_fp8<Element>(smem.q(0), landed_fp8(false, stage), first_key, s);
      // Per-token scales, staged beside the block (token_scales.cuh).
      if (kTokenScales && token_scales.k.scales != nullptr) {
        scale_warp_columns_from_stage(s, smem.staged_token_scales(stage, false), warp);
      }
    } else {
      warp_scores<Element>(smem_address(smem.q(0)), smem_address(smem.k(stage)), first_key, s);
    }
  };
  auto softmax_of_block = [&](int block_first_key, const RingCursor& slot,
                              float (&s)[4 * kWarpScoreTiles]) {
    const int block_visible = min(max(key_limit - block_first_key, 0), kBlockKeys);
    int visible[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) visible[h] = row_valid[h] ? block_visible - first_key : 0;
    float block_max[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      block_max[h] = max_over_row_quad(OnlineSoftmax<kTemperatureLse>::scale_and_mask_row(
          s, h, visible[h], scales.scale_log2));
    }
    share_block_max(exchange, block_max);
    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      correction[h] = softmax.exponentiate_row(s, h, block_max[h], p.lse_temperature);
    }
    if constexpr (kTokenScales) {
      if (token_scales.v.scales != nullptr) {
        mbarrier_wait(&header.v_full[slot.stage], slot.phase);  // V's scales land with V
        scale_warp_columns_from_stage(s, smem.staged_token_scales(slot.stage, true), warp);
      }
    }
    uint32_t probabilities[2 * kWarpScoreTiles];
    OnlineSoftmax<kTemperatureLse>::template pack_probabilities<Element>(s, probabilities);
    share_probabilities(exchange.probabilities, probabilities);
    OnlineSoftmax<kTemperatureLse>::rescale(o, correction);
    named_barrier_sync(kConsumerBarrier, 128);  // P of all 128 keys is in shared memory
  };
  auto values = [&](int block_first_key, int stage) {
    if constexpr (is_nvfp4(kKv)) {
      warp_values_nvfp4<Element>(exchange.probabilities,
                                 smem_address(smem.compact_v(stage, kNvfp4TileBytes)),
                                 smem.staged_block_scales(stage, true), p.nvfp4_page_local != 0,
                                 warp, o);
    } else if constexpr (is_fp8(kKv)) {
      warp_values_fp8<Element>(exchange.probabilities, smem_address(landed_fp8(true, stage)),
                               warp, o);
    } else {
      if (plan.seqlen_k - block_first_key < kBlockKeys) {
        zero_warp_value_tail(smem.v(stage), max(plan.seqlen_k - block_first_key, 0),
                             first_chunk);
      }
      warp_values<Element>(exchange.probabilities, smem_address(smem.v(stage)), first_chunk, o);
    }
  };

  // NVFP4 in the decode kernel is bound by its instructions (mostly the conversions), issued
  // by two CTAs' warps an SM: there the loop runs one block ahead on K, so that block u's P V
  // and block u + 1's S = Q K^T are one stretch of independent work (their conversions and
  // products interleave) between the two barriers of the softmax. The arithmetic is the same
  // in the same order: the results are bitwise those of the block-by-block loop. Its four-stage
  // rings have K(u + 1) issued before the consumers wait for it. (fp8 gained nothing by it: on
  // its two-slot rings the held K slot leaves one slot in flight.)
  constexpr bool kOneBlockAheadOnK = kCompactRings && is_nvfp4(kKv);
  if constexpr (!kOneBlockAheadOnK) {
    RingCursor ring;
    for (int u = plan.slice_begin; u < plan.slice_end; ++u, ring.advance(num_stages)) {
      mbarrier_wait(&header.k_full[ring.stage], ring.phase);
      FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstK);
      FLASHMSA_MARK_IF(u == plan.slice_end - 1, kMarkLastK);
      float s[4 * kWarpScoreTiles];
      scores(ring.stage, s);
      release_stage(&header.k_empty[ring.stage]);
      FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstScores);
      const int block_first_key = smem.union_blocks()[u] * kBlockKeys;
      softmax_of_block(block_first_key, ring, s);
      FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstSoftmax);
      mbarrier_wait(&header.v_full[ring.stage], ring.phase);
      FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstV);
      values(block_first_key, ring.stage);
      release_stage(&header.v_empty[ring.stage]);
    }
  } else if (plan.slice_begin < plan.slice_end) {
    RingCursor ring;  // block u's slot; K's of block u + 1 is the next one
    int block_first_key = smem.union_blocks()[plan.slice_begin] * kBlockKeys;  // block u's
    float s[4 * kWarpScoreTiles];
    mbarrier_wait(&header.k_full[ring.stage], ring.phase);
    FLASHMSA_MARK(kMarkFirstK);
    FLASHMSA_MARK_IF(plan.slice_begin + 1 == plan.slice_end, kMarkLastK);
    scores(ring.stage, s);
    release_stage(&header.k_empty[ring.stage]);
    FLASHMSA_MARK(kMarkFirstScores);
    softmax_of_block(block_first_key, ring, s);
    FLASHMSA_MARK(kMarkFirstSoftmax);
    for (int u = plan.slice_begin; u + 1 < plan.slice_end; ++u) {
      RingCursor next = ring;
      next.advance(num_stages);
      mbarrier_wait(&header.v_full[ring.stage], ring.phase);
      mbarrier_wait(&header.k_full[next.stage], next.phase);
      FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstV);
      FLASHMSA_MARK_IF(u + 1 == plan.slice_end - 1, kMarkLastK);
      values(block_first_key, ring.stage);
      scores(next.stage, s);
      fence_proxy_async_shared();  // release_stage's fence, once for both reads
      mbarrier_arrive(&header.v_empty[ring.stage]);
      mbarrier_arrive(&header.k_empty[next.stage]);
      block_first_key = smem.union_blocks()[u + 1] * kBlockKeys;
      softmax_of_block(block_first_key, next, s);
      ring = next;
    }
    mbarrier_wait(&header.v_full[ring.stage], ring.phase);
    FLASHMSA_MARK_IF(plan.slice_begin + 1 == plan.slice_end, kMarkFirstV);
    values(block_first_key, ring.stage);
    release_stage(&header.v_empty[ring.stage]);
  }
  FLASHMSA_MARK(kMarkLoopDone);

  // The rows' sums over all four warps' keys; the barrier in share_row_sums also means every
  // warp is done with the stages, which the reductions below write into (stage 0: a
  // speculative load the plan did not use may still be landing there: wait for it first).
  wait_for_speculative_load(smem);
  float sum[2], sum_t[2], lse[2], lse_t[2], scale[2];
  softmax.quad_sums(sum, sum_t);
  share_row_sums<kTemperatureLse>(exchange, sum, sum_t);
  softmax.lse_of_sums(sum, sum_t, p.lse_temperature, lse, lse_t);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    scale[h] = sum[h] > 0.f ? scales.v_global_scale * reciprocal_flush(sum[h]) : 0.f;
  }
  if constexpr (is_fp8(kKv)) fp8_values_in_natural_order(o);
  if constexpr (is_nvfp4(kKv)) nvfp4_values_in_natural_order(o);
  const RowPartial partial = gather_row_partial(o, scale, lse, lse_t);
  FLASHMSA_MARK(kMarkPublished);

  if (p.push_reduce) {  // the launch plan sets it only with cluster_reduce
    reduce_by_push<Element, kTemperatureLse>(smem, plan, push, partial);
    FLASHMSA_TIMELINE_RECORD();
    return;
  }
  if (p.cluster_reduce) {
    // This CTA's partial, where publish_partial leaves the wgmma consumer's, for the pull.
    store_row_partial<kTemperatureLse>(partial, partial_out_rows(smem) + partial.row * kHeadDim,
                                       partial_lse_rows(smem) + partial.row,
                                       partial_lse_t_rows(smem) + partial.row);
    reduce_over_cluster<Element, kTemperatureLse>(p, smem, plan, kv_head, head_chunk);
    FLASHMSA_TIMELINE_RECORD();
    return;
  }
  const RowSource source = row_source(p, plan, 0, head_chunk, partial.row);
  if (source.valid) {
    const int64_t token = plan.first_row;
    const int64_t head = static_cast<int64_t>(kv_head) * p.group_size + source.head;
    if (p.num_splits > 1) {  // splits outside a cluster: fp32 partials for merge.cu
      const int64_t partial_row = workspace_partial_row(p, plan.split, token, head);
      store_row_partial<kTemperatureLse>(partial, p.partial_out + partial_row * kHeadDim,
                                         p.partial_lse + partial_row,
                                         p.partial_lse_t + partial_row);
      FLASHMSA_TIMELINE_RECORD();
      return;
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
  FLASHMSA_TIMELINE_RECORD();
}

}  // namespace flashmsa::sm90
