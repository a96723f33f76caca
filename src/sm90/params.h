// Parameters of the Hopper attention kernels (prefill_kernel and decode_kernel), filled on the
// host by launch.cu from flashmsa_args and the call's launch plan (launch_plan.h).
// Every pointer carries the shape it points at; strides are in elements.
#pragma once

#include <cuda.h>
#include <stdint.h>

#include "common/fast_divisor.h"
#include "sm90/kernel_traits.h"
#include "sm90/output_params.h"

namespace flashmsa::sm90 {

struct AttentionParams {
  // K and V as TMA tensors: flat (head_dim, total_k, Hkv), paged (head_dim, 128, Hkv,
  // num_pages). Boxes are 64 dims x 128 tokens: one 128-byte-swizzled panel of a block.
  CUtensorMap tma_k;  // CUtensorMap is 64-byte aligned by its own declaration
  CUtensorMap tma_v;

  const void* q;  // (total_q, Hq, 128), last dim contiguous, rows 16-byte aligned
  int64_t q_stride_token, q_stride_head;
  OutputParams output;

  const int32_t* q2k_indices;  // (Hkv, total_q, topk), any strides
  int64_t idx_stride_head, idx_stride_token, idx_stride_topk;
  const int32_t* cu_seqlens_q;  // (B + 1)
  const int32_t* cu_seqlens_k;  // flat: (B + 1); paged: nullptr
  const int32_t* seqused_k;     // paged: (B); flat: nullptr
  const int32_t* page_table;    // paged: (B, max_pages); flat: nullptr
  int64_t page_table_stride_batch, page_table_stride_page;
  const int32_t* q_offset_per_request;  // (B) when q_offset_mode == 2

  int64_t batch_size, total_q, total_k, num_pages, max_pages;
  int32_t num_qo_heads, num_kv_heads, group_size, topk;
  int32_t is_paged, causal, q_offset_mode;
  int64_t q_offset_value;

  // Row tiling: a consumer warpgroup owns 64 rows = tokens_per_warpgroup tokens x
  // heads_per_chunk query heads of one KV head; groups wider than 64 heads are split into
  // ceil(G / 64) head chunks, each its own CTA column.
  int32_t heads_per_chunk, num_head_chunks, tokens_per_warpgroup, tokens_per_tile;
  FastDivisor heads_per_chunk_divisor;  // row_source's
  int32_t num_consumer_warpgroups;  // 2: one CTA per SM; 1: the one-consumer shape, two per SM
  // Rows per request when every request may have the same number (total_q = B x uniform_rows,
  // decode batches), else 0: warp planning guesses the tile's rows from it (warp_planning.cuh).
  int32_t uniform_rows;
  // Tiles of at most 128 candidates plan in one warp (warp_planning.cuh): decode launches (one
  // consumer warpgroup) in entry order (kWarpPlanEntryOrder), the two-consumer kernel ascending
  // by block (kWarpPlanBitmap: through a bitmap of the request's blocks, or a sorting network
  // where they do not fit it; kWarpPlanSorted: always the network), which keeps the concurrent
  // prefill tiles of one head walking their blocks in the same order (entry order measured
  // 5-10% slower on M3 prefill). Larger tiles plan with every thread,
  // sorted (planning.cuh); 0.
  int32_t warp_planning;
  // Whether warp planning loads its slice's probable first block before the plan is done
  // (warp_planning.cuh; 1 unless the test-only override speculate=0 turns it off).
  int32_t speculate_first_block;
  // How blockIdx.x splits into (tile, head column, KV split), see cta_work(): decode puts the
  // tile outermost so that the CTAs of real tiles come first in the grid (the bound on tiles is
  // loose, and CTAs past the real tiles would otherwise take first-wave slots); prefill puts
  // the head column outermost so that one head's neighbouring tiles, which share blocks, run
  // together.
  int32_t tiles_outer;
  int64_t max_tiles;  // tiles per head column (a bound: CTAs past the real tiles exit)
  // cta_work's divisors: max_tiles, num_kv_heads * num_head_chunks, num_head_chunks.
  FastDivisor tiles_divisor, columns_divisor, head_chunks_divisor;
  uint64_t kv_cache_hint;  // L2 policy of the K/V loads (producer.cuh)
  // Loads in flight (producer.cuh: produce): 0 lets the rings alone bound them; 1 issues V(i)
  // once K(i - 1) has landed, 2 also K(i) once V(i - 1) has (at most three or two 32 KiB
  // operands in flight per CTA). The plan gives multi-token prediction 2 (launch_plan.cpp), the
  // rest 0, and rings of one stage always 0; the test-only throttle override sets it.
  int32_t inflight_throttle;

  // KV split: num_splits CTAs share each tile's union of blocks. Decode launches run them as
  // one thread-block cluster that combines the partials through distributed shared memory
  // (cluster_reduce, cluster_reduce.cuh); other launches write fp32 partials, (num_splits,
  // total_q, Hq, 128) and (num_splits, total_q, Hq), to the workspace and merge.cu reduces them.
  // num_splits == 1 writes out directly.
  int32_t num_splits;
  FastDivisor splits_divisor;
  int32_t cluster_reduce;
  // Cluster launches of one CTA per SM, and the one-token kernel's at two: one-token tiles push
  // their partial rows into their owners' shared memory (cluster_reduce.cuh: reduce_by_push)
  // instead of the barrier-and-pull reduction.
  int32_t push_reduce;
  float* partial_out;
  float* partial_lse;
  float* partial_lse_t;

  SmemLayout smem_layout;

  float scale_log2;        // softmax_scale * k_global_scale * log2(e)
  float v_global_scale;
  float lse_temperature;   // T
  // Planning's entry_place: entry e of a tile's list is token e / topk. Last, so that the
  // fields before it keep the offsets (and the constant-cache lines) they were measured with.
  FastDivisor topk_divisor;
  // Pacing of one-wave multi-token prediction grids (pacing.cuh): 0 off, else kPacingSlackZero
  // + the slack in quarter blocks (either side of the running CTAs' mean of steps left) past
  // which a CTA loads unthrottled.
  int32_t pacing_slack;
  // Device-resident global scales (contract section 6), or nullptr: the consumers multiply
  // scale_log2 and v_global_scale (then 1) by the floats these hold when the kernel runs, so a
  // captured graph replays with the scales of the moment (global_scales()).
  const float* k_global_scale_device;
  const float* v_global_scale_device;
  // flashmsa_args::causal_entry_limit: a query reads only the first entries_read(...) entries
  // of its index row (common/visibility.h); planning starts each token's first negative there.
  int32_t causal_entry_limit;
  // Per-token fp8 scales (token_scales.cuh), (Hkv, slots) rows, or nullptr.
  const float* k_token_scale;
  int64_t k_token_scale_stride_head, k_token_scale_slots;
  const float* v_token_scale;
  int64_t v_token_scale_stride_head, v_token_scale_slots;
  // NVFP4 block scales (nvfp4_convert.cuh): E4M3 bytes, swizzled 128x4 tables (rows
  // token * Hkv + head flat, (page * Hkv + head) * 128 + t paged) or, with nvfp4_page_local,
  // one plane per (page, KV head) at these byte strides. Keys past a request's end read no
  // scale (they convert with scale 0).
  const uint8_t* k_block_scale;
  const uint8_t* v_block_scale;
  int32_t nvfp4_page_local;
  int64_t k_block_scale_stride_page, k_block_scale_stride_head;
  int64_t v_block_scale_stride_page, v_block_scale_stride_head;
};

// The call's score scale (log2 units) and output scale, with the device-resident global scales
// applied: a power-of-two scale gives the float form's values bit for bit.
struct GlobalScales {
  float scale_log2;
  float v_global_scale;
};

#ifdef __CUDACC__
__device__ __forceinline__ GlobalScales global_scales(const AttentionParams& p) {
  GlobalScales scales{p.scale_log2, p.v_global_scale};
  if (p.k_global_scale_device != nullptr) scales.scale_log2 *= __ldg(p.k_global_scale_device);
  if (p.v_global_scale_device != nullptr) scales.v_global_scale *= __ldg(p.v_global_scale_device);
  return scales;
}
#endif

}  // namespace flashmsa::sm90
