// Per-token fp8 scales (flashmsa_args::k_token_scale / v_token_scale; docs/contract.md section 6,
// this project's extension): key t of a block is e4m3 * k_scale[h, slot] * k_global_scale, its
// value likewise with the v_ scales. The stages keep the exact E4M3 conversion, and the scales
// apply in fp32 where a column of the block is one key:
//   K: the key's score column, after Q K^T (the global scale is already in scale_log2);
//   V: the key's probability column, after the row sums took it and before it is rounded for
//      P V, so that O accumulates P * v_scale * V.
// A thread holds columns 8 j + 2 (lane % 4) + c of its keys (mma.cuh's accumulator layout), so
// it needs those columns' scales; each scale is loaded from global memory once per block and
// warp (one-token consumer) or CTA (wgmma consumers, staged in shared memory). Slots of keys
// past the request's end may never have been written (an engine writes a slot's scale with its
// key), so they read as 0, not as whatever the memory holds (0 * NaN would be NaN where P is 0).
#pragma once

#include <stdint.h>

#include "sm90/kernel_traits.h"
#include "sm90/params.h"

namespace flashmsa::sm90 {

struct TokenScaleRow {
  const float* scales;  // this KV head's row, nullptr when the call has no such scales
  int64_t slots;
};

struct TokenScaleRows {
  TokenScaleRow k, v;
};

__device__ __forceinline__ TokenScaleRows token_scale_rows(const AttentionParams& p,
                                                           int kv_head) {
  TokenScaleRows rows{{nullptr, 0}, {nullptr, 0}};
  if (p.k_token_scale != nullptr) {
    rows.k = {p.k_token_scale + kv_head * p.k_token_scale_stride_head, p.k_token_scale_slots};
  }
  if (p.v_token_scale != nullptr) {
    rows.v = {p.v_token_scale + kv_head * p.v_token_scale_stride_head, p.v_token_scale_slots};
  }
  return rows;
}

// The slot of a union block's first key: paged, page * 128 (its TMA coordinate is the page);
// flat, its first key row.
__device__ __forceinline__ int64_t block_first_slot(const AttentionParams& p, int32_t coord) {
  return p.is_paged ? static_cast<int64_t>(coord) * kBlockKeys : static_cast<int64_t>(coord);
}

// The scale of key `column` of a block whose key 0 has slot first_slot; keys at or past
// valid_keys (the request's end) get 0.
__device__ __forceinline__ float column_scale(const TokenScaleRow& row, int64_t first_slot,
                                              int column, int valid_keys) {
  const int64_t slot = first_slot + column;
  return column < valid_keys && slot < row.slots ? __ldg(row.scales + slot) : 0.f;
}

// The prefill kernel's wgmma consumers stage a block's scales in shared memory beside its stage
// (Smem::token_scales), written by the threads that rewrite its rows (kv_convert.cuh: a row a
// thread, K's rows then V's, or warpgroup 0 K's and warpgroup 1 V's) before the barrier that
// publishes the rewrite. They are staged permuted (kernel_traits.h kStagedScaleFloats): column
// 8 j + 2 q + c at row q, position 2 j + c, so that a thread of column quad q = lane % 4 reads
// its 32 columns' scales as 8 float4 (a warp's read is four distinct 16-byte words, broadcast:
// one shared-memory wavefront each, half of what 16 float2 pairs cost).
// A converting thread loads its key's scales one block ahead (load_block_token_scales for block
// u + 1 while block u runs) and stores them with the block's rewrite, so the load's latency is
// off the rewrite's chain. `thread`: 0 .. 128 * kConsumers - 1 of the converting threads.
struct KeyTokenScales {
  float k, v;  // this thread's key's scales (1 where the call has none)
};

template <int kConsumers>
__device__ __forceinline__ KeyTokenScales load_block_token_scales(const TokenScaleRows& rows,
                                                                  int64_t first_slot,
                                                                  int valid_keys, int thread) {
  const int key = thread % kBlockKeys;
  auto scale_of = [&](const TokenScaleRow& row) {
    return row.scales == nullptr ? 1.f : column_scale(row, first_slot, key, valid_keys);
  };
  KeyTokenScales scales{1.f, 1.f};
  if (kConsumers == 1 || thread < kBlockKeys) scales.k = scale_of(rows.k);
  if (kConsumers == 1 || thread >= kBlockKeys) scales.v = scale_of(rows.v);
  return scales;
}

template <int kConsumers>
__device__ __forceinline__ void store_block_token_scales(const KeyTokenScales& scales,
                                                         float* stage_scales, int thread) {
  const int key = thread % kBlockKeys;
  const int position = (key / 2 % 4) * kStagedScaleRowFloats + key / 8 * 2 + key % 2;
  if (kConsumers == 1 || thread < kBlockKeys) stage_scales[position] = scales.k;
  if (kConsumers == 1 || thread >= kBlockKeys) {
    stage_scales[kStagedScaleFloats + position] = scales.v;
  }
}

// Accumulator values times their column's scale from one operand's staged scales (column 8 j +
// 2 (lane % 4) + c of element 4 j + 2 h + c; a block's 128 columns, 64 values a thread): float4
// i holds the scales of j = 2 i (x, y) and 2 i + 1 (z, w).
template <int kScores>
__device__ __forceinline__ void scale_column_quad(float (&s)[kScores], int i, float4 scale) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    s[8 * i + 2 * h] *= scale.x;
    s[8 * i + 2 * h + 1] *= scale.y;
    s[8 * i + 4 + 2 * h] *= scale.z;
    s[8 * i + 4 + 2 * h + 1] *= scale.w;
  }
}

__device__ __forceinline__ const float4* staged_column_scales(const float* staged_scales) {
  return reinterpret_cast<const float4*>(staged_scales + (threadIdx.x % 4) * kStagedScaleRowFloats);
}

template <int kScores>
__device__ __forceinline__ void scale_columns_from_stage(float (&s)[kScores],
                                                         const float* staged_scales) {
  static_assert(kScores == kBlockKeys / 2, "a thread holds 64 values of a block's 128 columns");
  const float4* row = staged_column_scales(staged_scales);
#pragma unroll
  for (int i = 0; i < kScores / 8; ++i) scale_column_quad(s, i, row[i]);
}

// The scores' scales in two halves: the first read while the scores' wgmma runs, so that the
// multiplies after its wait do not all wait on shared-memory reads (all 32 registers of them
// held beside the accumulator in flight spill), the second after.
struct EarlyColumnScales {
  float4 value[kBlockKeys / 32];
};

__device__ __forceinline__ EarlyColumnScales read_early_column_scales(const float* staged_scales) {
  const float4* row = staged_column_scales(staged_scales);
  EarlyColumnScales early;
#pragma unroll
  for (int i = 0; i < kBlockKeys / 32; ++i) early.value[i] = row[i];
  return early;
}

template <int kScores>
__device__ __forceinline__ void scale_columns_from_stage(float (&s)[kScores],
                                                         const float* staged_scales,
                                                         const EarlyColumnScales& early) {
  static_assert(kScores == kBlockKeys / 2, "a thread holds 64 values of a block's 128 columns");
  const float4* row = staged_column_scales(staged_scales);
#pragma unroll
  for (int i = 0; i < kScores / 8; ++i) {
    scale_column_quad(s, i, i < kBlockKeys / 32 ? early.value[i] : row[i]);
  }
}

// The one-token consumer's warps each score 32 keys: lane l loads key first_key + l's scale (one
// coalesced load a warp; keys past valid_keys read 0), and each thread takes its columns'
// scales from their lanes (column 8 j + 2 (lane % 4) + c of the warp's keys, element 4 j + 2 h +
// c).
__device__ __forceinline__ float load_lane_key_scale(const TokenScaleRow& row, int64_t first_slot,
                                                     int first_key, int valid_keys) {
  return column_scale(row, first_slot, first_key + static_cast<int>(threadIdx.x % 32),
                      valid_keys);
}

// Blocks of more keys (the token-warp consumer's 128): lane_scale[r] holds key 32 r + lane's.
template <int kScores>
__device__ __forceinline__ void scale_columns_by_lanes(float (&s)[kScores],
                                                       const float (&lane_scale)[kScores / 16]) {
  const int base = 2 * (threadIdx.x % 4);
#pragma unroll
  for (int j = 0; j < kScores / 4; ++j) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float scale = __shfl_sync(0xffffffffu, lane_scale[j / 4], base + 8 * (j % 4) + c);
      s[4 * j + c] *= scale;
      s[4 * j + 2 + c] *= scale;
    }
  }
}
template <int kScores>
__device__ __forceinline__ void scale_columns_by_lanes(float (&s)[kScores], float lane_scale) {
  const float lane_scales[1] = {lane_scale};
  scale_columns_by_lanes(s, lane_scales);
}
__device__ __forceinline__ void load_lane_key_scales(const TokenScaleRow& row, int64_t first_slot,
                                                     int valid_keys, float (&lane_scale)[4]) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    lane_scale[r] = row.scales == nullptr
                        ? 1.f
                        : load_lane_key_scale(row, first_slot, 32 * r, valid_keys);
  }
}

}  // namespace flashmsa::sm90
