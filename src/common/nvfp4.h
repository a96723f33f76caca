// NVFP4 decoding (contract section 6) on host and device: E2M1 values, two per byte with the
// low nibble holding the even element, scaled by one E4M3 byte per 16 consecutive elements of a
// row. The scale bytes are stored either in the swizzled 128x4 layout used by the Blackwell
// block-scaled MMA (32 rows x 4 scales interleaved into 512-byte tiles), or page-local: one plane
// of 128 rows per (page, KV head), next to that page's data (the NVFP4 page of vLLM).
#pragma once

#include <stdint.h>

#include "common/fp8.h"
#include "common/visibility.h"

namespace flashmsa {

constexpr int kNvfp4ElementsPerScale = 16;
constexpr int kNvfp4ScaleCols = 128 / kNvfp4ElementsPerScale;  // scales per row of head_dim 128
constexpr int kNvfp4ScaleTileRows = 128;                       // rows of one swizzled tile

// E2M1: 1 sign bit, 2 exponent bits (bias 1), 1 mantissa bit; magnitudes
// 0, 0.5, 1, 1.5, 2, 3, 4, 6. Only the low 4 bits of `nibble` are read.
FLASHMSA_HOST_DEVICE float e2m1_to_float(uint32_t nibble) {
  const uint32_t exponent = (nibble >> 1) & 0x3;
  const float mantissa = (nibble & 0x1) ? 0.5f : 0.0f;
  // exponent 0 is the subnormal binade (0 or 0.5); otherwise (1 + m) * 2^(exponent - 1).
  const float magnitude =
      exponent == 0 ? mantissa : (1.0f + mantissa) * static_cast<float>(1u << (exponent - 1));
  return (nibble & 0x8) ? -magnitude : magnitude;
}

// Element `index` (0..D-1) of a packed row: byte index / 2, low nibble for even indices.
FLASHMSA_HOST_DEVICE float nvfp4_element(const uint8_t* packed_row, int index) {
  const uint8_t byte = packed_row[index >> 1];
  return e2m1_to_float((index & 1) ? (byte >> 4) : (byte & 0xF));
}

// Byte offset of logical scale (row, col) in the swizzled layout, for `num_cols` scales per row:
// ((row / 128) * ceil(num_cols / 4) + col / 4) * 512 + (row % 32) * 16
//   + ((row % 128) / 32) * 4 + col % 4.
FLASHMSA_HOST_DEVICE int64_t nvfp4_scale_offset(int64_t row, int64_t col,
                                                int64_t num_cols = kNvfp4ScaleCols) {
  const int64_t col_tiles = (num_cols + 3) / 4;
  return ((row / 128) * col_tiles + col / 4) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4 +
         col % 4;
}

// Scale rows: `token * Hkv + head` for flat K/V ...
FLASHMSA_HOST_DEVICE int64_t nvfp4_scale_row_flat(int64_t token, int64_t head,
                                                  int64_t num_kv_heads) {
  return token * num_kv_heads + head;
}

// ... and `(page * Hkv + head) * 128 + token_in_page` for paged K/V.
FLASHMSA_HOST_DEVICE int64_t nvfp4_scale_row_paged(int64_t page, int64_t head,
                                                   int64_t token_in_page, int64_t num_kv_heads) {
  return (page * num_kv_heads + head) * kBlockSize + token_in_page;
}

// Page-local form: byte offset of the scale of (token_in_page, col) within its (page, KV head)
// plane. K scales are linear, row after row ...
FLASHMSA_HOST_DEVICE int64_t nvfp4_page_local_key_scale_offset(int64_t token_in_page, int64_t col,
                                                               int64_t num_cols = kNvfp4ScaleCols) {
  return token_in_page * num_cols + col;
}

// ... V scales in token-quad order: the scales of one column for four consecutive tokens sit
// side by side, quad after quad.
FLASHMSA_HOST_DEVICE int64_t nvfp4_page_local_value_scale_offset(
    int64_t token_in_page, int64_t col, int64_t num_cols = kNvfp4ScaleCols) {
  return (token_in_page / 4) * 4 * num_cols + col * 4 + token_in_page % 4;
}

// Bytes a scale tensor needs for `rows` rows: whole 128-row tiles of num_cols scales each.
FLASHMSA_HOST_DEVICE int64_t nvfp4_scale_bytes_needed(int64_t rows,
                                                      int64_t num_cols = kNvfp4ScaleCols) {
  const int64_t col_tiles = (num_cols + 3) / 4;
  return (rows + kNvfp4ScaleTileRows - 1) / kNvfp4ScaleTileRows * col_tiles * 512;
}

}  // namespace flashmsa
