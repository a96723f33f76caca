// Per-token fp8 scales (flashmsa_args::k_token_scale / v_token_scale; docs/contract.md section 6,
// this project's extension): key t of a block is e4m3 * k_scale[h, slot] * k_global_scale, its
// value likewise with the v_ scales. The stages keep the exact E4M3 conversion, and the scales
// apply in fp32 where a column of the block is one key:
//   K: the key's score column, after Q K^T (the global scale is already in scale_log2);
//   V: the key's probability column, after the row sums took it and before it is rounded for
//      P V, so that O accumulates P * v_scale * V.
// Every kernel's producer side stages a block's scales beside its stage, as asynchronous copies
// that land on the stage's full barriers with the data (producer.cuh: stage_scales_beside_blocks),
// and the consumers read them from there: loaded by the consumers themselves, they put a global
// round trip, or shuffles, on each block's chain. A consumer reads K's scales before it
// releases K's stage and V's before it releases V's, as it reads their data.
// Slots of keys past the request's end may never have been written (an engine writes a slot's
// scale with its key), so they are staged as 0, not as whatever the memory holds (0 * NaN would
// be NaN where P is 0).
#pragma once

#include <stdint.h>

#include "sm90/kernel_traits.h"
#include "sm90/params.h"
#include "sm90/ptx.cuh"

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

// The staged order (kernel_traits.h kStagedScaleFloats): column 8 j + 2 q + c at row q,
// position 2 j + c, so that a thread of column quad q = lane % 4 (mma.cuh's accumulator layout:
// it holds columns 8 j + 2 (lane % 4) + c) reads its columns' scales as float4s, and a warp's
// read is four distinct 16-byte words, broadcast: one shared-memory wavefront each.
__device__ __forceinline__ int staged_scale_position(int key) {
  return (key / 2 % 4) * kStagedScaleRowFloats + key / 8 * 2 + key % 2;
}

// One operand's row of the call's scales (selected field by field: a runtime choice between
// the two rows of a struct puts it in local memory).
__device__ __forceinline__ TokenScaleRow operand_row(const TokenScaleRows& rows, bool value) {
  return {value ? rows.v.scales : rows.k.scales, value ? rows.v.slots : rows.k.slots};
}

// One operand's scales of a block whose key 0 has slot first_slot into `staged`: lane l copies
// keys 4 l .. 4 l + 3, zero at or past valid_keys (the request's end) and past the row. A call
// without this operand's scales stages nothing (its consumers do not multiply). Key 4 l + i's
// position is key 4 l's plus (i / 2) rows plus i % 2 (staged_scale_position: 2 l % 4 is even).
__device__ __forceinline__ void stage_operand_token_scales(const TokenScaleRow& row,
                                                           int64_t first_slot, int valid_keys,
                                                           float* staged) {
  if (row.scales == nullptr) return;
  const int first_key = 4 * static_cast<int>(threadIdx.x % 32);
  const int64_t row_keys = min(max(row.slots - first_slot, int64_t{0}), int64_t{kBlockKeys});
  const int keys = min(valid_keys, static_cast<int>(row_keys));
  const float* source = row.scales + first_slot + first_key;
  float* destination = staged + staged_scale_position(first_key);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const bool valid = first_key + i < keys;
    copy_word_async(destination + (i / 2) * kStagedScaleRowFloats + i % 2,
                    valid ? source + i : row.scales, valid ? 4 : 0);
  }
}

// Accumulator values times their column's scale (column 8 j + 2 (lane % 4) + c of element 4 j +
// 2 h + c): float4 i of the thread's staged row holds the scales of j = 2 i (x, y) and 2 i + 1
// (z, w).
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

// A block's 128 columns, 64 values a thread (the wgmma consumers' and the token warps').
template <int kScores>
__device__ __forceinline__ void scale_columns_from_stage(float (&s)[kScores],
                                                         const float* staged_scales) {
  static_assert(kScores == kBlockKeys / 2, "a thread holds 64 values of a block's 128 columns");
  const float4* row = staged_column_scales(staged_scales);
#pragma unroll
  for (int i = 0; i < kScores / 8; ++i) scale_column_quad(s, i, row[i]);
}

// The one-token consumer's warp w: its 32 keys 32 w .. 32 w + 31 (16 values a thread).
template <int kScores>
__device__ __forceinline__ void scale_warp_columns_from_stage(float (&s)[kScores],
                                                              const float* staged_scales,
                                                              int warp) {
  static_assert(kScores == 16, "a thread holds 16 values of its warp's 32 columns");
  const float4* row = staged_column_scales(staged_scales) + 2 * warp;
#pragma unroll
  for (int i = 0; i < 2; ++i) scale_column_quad(s, i, row[i]);
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

}  // namespace flashmsa::sm90
