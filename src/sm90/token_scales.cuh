// Per-token fp8 scales (flashmsa_args::k_token_scale / v_token_scale; docs/contract.md section 6,
// this project's extension): key t of a block is e4m3 * k_scale[h, slot] * k_global_scale, its
// value likewise with the v_ scales. The stages keep the exact E4M3 conversion, and the scales
// apply in fp32 where a column of the block is one key:
//   K: the key's score column, after Q K^T (the global scale is already in scale_log2);
//   V: the key's probability column, after the row sums took it and before it is rounded for
//      P V, so that O accumulates P * v_scale * V.
// A thread holds columns 8 j + 2 (lane % 4) + c of its keys (mma.cuh's accumulator layout), so it
// loads those columns' scales: kColumns = half its scores. Slots of keys past the request's end
// may never have been written (an engine writes a slot's scale with its key), so they read as 0,
// not as whatever the memory holds (0 * NaN would be NaN where P is 0).
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

// The scales of this thread's columns first_column + 8 j + 2 (lane % 4) + c (element 2 j + c).
template <int kColumns>
__device__ __forceinline__ void load_column_scales(const TokenScaleRow& row, int64_t first_slot,
                                                   int first_column, int valid_keys,
                                                   float (&scale)[kColumns]) {
  const int base = first_column + 2 * (threadIdx.x % 4);
#pragma unroll
  for (int j = 0; j < kColumns / 2; ++j) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      scale[2 * j + c] = column_scale(row, first_slot, base + 8 * j + c, valid_keys);
    }
  }
}

// Accumulator values times their column's scale: element 4 j + 2 h + c is column 2 j + c.
template <int kScores>
__device__ __forceinline__ void scale_columns(float (&s)[kScores],
                                              const float (&scale)[kScores / 2]) {
#pragma unroll
  for (int j = 0; j < kScores / 4; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int c = 0; c < 2; ++c) s[4 * j + 2 * h + c] *= scale[2 * j + c];
    }
  }
}

// scale_columns with the scales loaded on the way (load_column_scales' columns and zeros): for
// a consumer whose registers are taken by S and O, so that the loads need not all be in flight.
template <int kScores>
__device__ __forceinline__ void scale_columns_by_row(float (&s)[kScores], const TokenScaleRow& row,
                                                     int64_t first_slot, int first_column,
                                                     int valid_keys) {
  const int base = first_column + 2 * (threadIdx.x % 4);
#pragma unroll
  for (int j = 0; j < kScores / 4; ++j) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float scale = column_scale(row, first_slot, base + 8 * j + c, valid_keys);
      s[4 * j + c] *= scale;
      s[4 * j + 2 + c] *= scale;
    }
  }
}

}  // namespace flashmsa::sm90
