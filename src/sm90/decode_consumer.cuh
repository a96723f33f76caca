// The consumer warpgroup of a one-token decode tile: one query token, at most 16 query heads of
// one KV head (MiniMax-M3: 16). Its rows are one m16 row tile, so the warpgroup's four warps
// split each block's 128 keys (warp w: keys 32w .. 32w + 31) and run warp-level mma.sync on
// them, each with its own online softmax, instead of one 64-row wgmma tile of which 48 rows are
// empty. Per block and warp: S = Q K^T (32 mma, K fragments by ldmatrix from the swizzled
// stage), the softmax of 16 scores per thread, O += P V (32 mma, V fragments by transposed
// ldmatrix). The warps' partial results are merged through shared memory at the end, then the
// KV split's CTAs through the cluster (cluster_reduce.cuh) or the output is written directly.
// Decode moves K and V once through the SM: what limits it is the latency of each block's
// chain, not tensor throughput, and this chain is a quarter of the warpgroup's.
#pragma once

#include <math.h>
#include <stdint.h>

#include "sm90/cluster_reduce.cuh"
#include "sm90/consumer.cuh"
#include "sm90/kernel_traits.h"
#include "sm90/mma.cuh"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/ptx.cuh"
#include "sm90/softmax.cuh"
#include "sm90/split_combine.cuh"
#include "sm90/timeline.cuh"

namespace flashmsa::sm90 {

constexpr int kKeysPerWarp = kBlockKeys / 4;       // 32
constexpr int kWarpScoreTiles = kKeysPerWarp / 8;  // n-tiles of 8 keys
constexpr int kDimSteps = kHeadDim / 16;           // k-steps of S = Q K^T

// Launch-uniform per CTA: whether the tile runs this consumer.
__device__ __forceinline__ bool runs_one_token_consumer(const PrefillParams& p,
                                                        const TilePlan& plan) {
  return plan.num_tokens == 1 && p.heads_per_chunk <= kDecodeRows;
}

// S (16 rows x this warp's 32 keys) = Q K^T, element 4 * j + 2 * h + c at row lane / 4 + 8 * h,
// key 8 * j + 2 * (lane % 4) + c of the warp's keys. Q rows 0..15 (the token's heads; rows past
// the group are zero) come from the swizzled Q buffer that load_queries filled, one A fragment
// per k-step: read again for every block rather than held in 32 registers across the loop.
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

// O (16 rows x 128 dims, the wgmma accumulator layout of one warp) += P V over the warp's 32
// keys; p holds two k-steps of A fragments in S's accumulator order.
template <typename Element>
__device__ __forceinline__ void warp_values(const uint32_t (&p)[2 * kWarpScoreTiles],
                                            uint32_t v_tile, int first_key, Accumulator& o) {
  const int lane = threadIdx.x % 32;
  const int matrix = lane / 8;
#pragma unroll
  for (int step = 0; step < kKeysPerWarp / 16; ++step) {
    const uint32_t a[4] = {p[4 * step], p[4 * step + 1], p[4 * step + 2], p[4 * step + 3]};
    const int key = first_key + 16 * step + 8 * (matrix % 2) + lane % 8;
#pragma unroll
    for (int pair = 0; pair < kHeadDim / 16; ++pair) {
      // Matrices: dims of n-tile 2 * pair (keys low, high), then of n-tile 2 * pair + 1.
      uint32_t b[4];
      ldmatrix_x4_transposed(b, swizzled_chunk(v_tile, key, 2 * pair + matrix / 2, kKvPanelBytes));
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&o[8 * pair]), a, b[0], b[1]);
      mma_m16n8k16<Element>(*reinterpret_cast<float(*)[4]>(&o[8 * pair + 4]), a, b[2], b[3]);
    }
  }
}

// V rows of this warp's keys at or past `first_invalid_key` (past the request's end: may hold
// anything, NaN included, and 0 * NaN is NaN) become zero, as zero_value_tail does for a
// warpgroup; the fence orders the stores before the next TMA write into the stage.
__device__ __forceinline__ void zero_warp_value_tail(uint8_t* v_tile, int first_invalid_key,
                                                     int first_key) {
  zero_value_rows(v_tile, max(first_invalid_key, first_key), first_key + kKeysPerWarp,
                  threadIdx.x % 32, 32);
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

// The four warps' normalised partials (fp32 rows, in the first K stage) and their LSEs (in the
// first V stage, after the cluster partial's LSEs).
__device__ __forceinline__ float* warp_partial_rows(const Smem& smem, int warp) {
  return reinterpret_cast<float*>(smem.k(0)) + warp * kDecodeRows * kHeadDim;
}
__device__ __forceinline__ float* warp_partial_lse(const Smem& smem, int warp) {
  return reinterpret_cast<float*>(smem.v(0)) + 2 * kRowsPerWarpgroup + warp * kDecodeRows;
}
__device__ __forceinline__ float* warp_partial_lse_t(const Smem& smem, int warp) {
  return warp_partial_lse(smem, 4) + warp * kDecodeRows;
}
static_assert(4 * kDecodeRows * kHeadDim * sizeof(float) <= kKvTileBytes,
              "the four warps' partials must fit in one K stage");

// The four warps' partials (warp_partial_rows) combined into thread t's share of the CTA's:
// row t / 8, columns 16 * (t % 8) .. + 15.
template <bool kTemperatureLse>
__device__ __forceinline__ RowPartial merge_warp_partials(const Smem& smem, int row, int column) {
  RowPartial partial;
  float warp_lse[4], warp_lse_t[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    warp_lse[w] = warp_partial_lse(smem, w)[row];
    if (kTemperatureLse) warp_lse_t[w] = warp_partial_lse_t(smem, w)[row];
  }
  partial.lse = log_sum_exp(warp_lse);
  partial.lse_t = kTemperatureLse ? log_sum_exp(warp_lse_t) : -INFINITY;
#pragma unroll
  for (int i = 0; i < 4; ++i) partial.value[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (partial.lse != -INFINITY) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      add_weighted_share(partial.value, __expf(warp_lse[w] - partial.lse),
                         warp_partial_rows(smem, w) + row * kHeadDim + column);
    }
  }
  return partial;
}

template <typename Element, bool kTemperatureLse>
__device__ inline void consume_one_token(const PrefillParams& p, const Smem& smem,
                                         const TilePlan& plan, int kv_head, int head_chunk) {
  const int thread = threadIdx.x % 128;
  const int warp = thread / 32, lane = thread % 32;
  const int first_key = warp * kKeysPerWarp;  // of each block
  SmemHeader& header = smem.header();

  // Rows lane / 4 and lane / 4 + 8 are heads of the tile's one token; rows past the group read
  // nothing (their Q rows are zero and their scores are masked).
  bool row_valid[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_valid[h] = row_source(p, plan, 0, head_chunk, lane / 4 + 8 * h).valid;
  }
  const int key_limit = smem.token_key_limit()[0];

  OnlineSoftmax<kTemperatureLse> softmax;
  softmax.init();
  Accumulator o;
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;

  const int num_stages = p.smem_layout.num_stages;
  for (int u = plan.slice_begin; u < plan.slice_end; ++u) {
    const auto [stage, phase] = ring_slot(u - plan.slice_begin, num_stages);
    mbarrier_wait(&header.k_full[stage], phase);
    FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstK);
    FLASHMSA_MARK_IF(u == plan.slice_end - 1, kMarkLastK);
    float s[4 * kWarpScoreTiles];
    warp_scores<Element>(smem_address(smem.q(0)), smem_address(smem.k(stage)), first_key, s);
    release_stage(&header.k_empty[stage]);
    FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstScores);

    const int block_first_key = smem.union_blocks()[u] * kBlockKeys;
    const int block_visible = min(max(key_limit - block_first_key, 0), kBlockKeys);
    int visible[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) visible[h] = row_valid[h] ? block_visible - first_key : 0;
    uint32_t probabilities[2 * kWarpScoreTiles];
    float correction[2];
    softmax.template update<Element>(s, visible, p.scale_log2, p.lse_temperature, probabilities,
                                     correction);
    OnlineSoftmax<kTemperatureLse>::rescale(o, correction);
    FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstSoftmax);

    mbarrier_wait(&header.v_full[stage], phase);
    FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstV);
    if (plan.seqlen_k - block_first_key < first_key + kKeysPerWarp) {
      zero_warp_value_tail(smem.v(stage), plan.seqlen_k - block_first_key, first_key);
    }
    warp_values<Element>(probabilities, smem_address(smem.v(stage)), first_key, o);
    release_stage(&header.v_empty[stage]);
  }
  FLASHMSA_MARK(kMarkLoopDone);

  // Each warp's normalised partial and LSEs into shared memory (stage 0, idle now; a
  // speculative load the plan did not use may still be landing there: wait for it).
  float lse[2], lse_t[2], sum[2];
  softmax.finish(lse, lse_t, sum, p.lse_temperature);
  wait_for_speculative_load(smem);
  constexpr uint32_t kConsumerBarrier = 1;  // the warpgroup's own (load_queries uses it too)
  named_barrier_sync(kConsumerBarrier, 128);  // every warp is done with the stages
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = lane / 4 + 8 * h;
    const float scale = sum[h] > 0.f ? p.v_global_scale / sum[h] : 0.f;
    store_partial_row<kTemperatureLse>(warp_partial_rows(smem, warp) + row * kHeadDim,
                                       &warp_partial_lse(smem, warp)[row],
                                       &warp_partial_lse_t(smem, warp)[row], o, h, scale, lse[h],
                                       lse_t[h]);
  }
  named_barrier_sync(kConsumerBarrier, 128);
  FLASHMSA_MARK(kMarkPublished);

  // Merge the four warps: thread t combines row t / 8, columns 16 * (t % 8) .. + 15.
  const int row = thread / 8, column = 16 * (thread % 8);
  RowPartial partial = merge_warp_partials<kTemperatureLse>(smem, row, column);
  FLASHMSA_MARK(kMarkMerged);

  if (p.push_reduce) {  // launch.cu sets it only with cluster_reduce
    reduce_by_push<Element, kTemperatureLse>(p, smem, plan, kv_head, head_chunk, row, column,
                                             partial);
    FLASHMSA_TIMELINE_PRINT();
    return;
  }
  if (p.cluster_reduce) {
    // This CTA's partial, as publish_partial leaves it, for the cluster's reduction. Rows of
    // the warp partials are read by now; row `row` of the CTA partial overlaps warp 0's.
    named_barrier_sync(kConsumerBarrier, 128);
    float4* destination =
        reinterpret_cast<float4*>(partial_out_rows(smem) + row * kHeadDim + column);
#pragma unroll
    for (int i = 0; i < 4; ++i) destination[i] = partial.value[i];
    if (thread % 8 == 0) {
      partial_lse_rows(smem)[row] = partial.lse;
      if (kTemperatureLse) partial_lse_t_rows(smem)[row] = partial.lse_t;
    }
    reduce_over_cluster<Element, kTemperatureLse>(p, smem, plan, kv_head, head_chunk);
    FLASHMSA_TIMELINE_PRINT();
    return;
  }
  const RowSource source = row_source(p, plan, 0, head_chunk, row);
  if (source.valid) {
    const int64_t token = plan.first_row;
    const int64_t head = static_cast<int64_t>(kv_head) * p.group_size + source.head;
    Element* out = static_cast<Element*>(p.output.out) + p.output.out_offset(token, head) + column;
#pragma unroll
    for (int i = 0; i < 4; ++i) store4(out + 4 * i, partial.value[i]);
    if (thread % 8 == 0) {
      if (p.output.lse) p.output.lse[p.output.lse_offset(token, head)] = partial.lse;
      if (kTemperatureLse) p.output.lse_t[p.output.lse_t_offset(token, head)] = partial.lse_t;
    }
  }
  FLASHMSA_TIMELINE_PRINT();
}

}  // namespace flashmsa::sm90
