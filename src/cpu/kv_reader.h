// Reading K or V rows of any supported dtype and layout into fp32, for the CPU reference.
//
// One "row" is the head_dim values of one (token, KV head). The reader hides the layout (flat or
// paged, any strides) and the storage (bf16, fp16, fp8 E4M3, NVFP4 with swizzled or page-local
// block scales) behind one call, so that the attention code sees only fp32 rows and a flat and a
// paged call on the same logical data decode to bitwise identical values.
#pragma once

#include <stdint.h>
#include <string.h>

#include <array>

#include "common/float16.h"
#include "common/fp8.h"
#include "common/nvfp4.h"
#include "flashmsa/flashmsa.h"

namespace flashmsa {
namespace cpu {

constexpr int kHeadDim = 128;

// Lookup tables: 256 E4M3 bytes and 16 E2M1 nibbles, built once from the exact decoders.
struct DecodeTables {
  std::array<float, 256> e4m3;
  std::array<float, 16> e2m1;
  DecodeTables() {
    for (int byte = 0; byte < 256; ++byte) e4m3[byte] = e4m3_to_float(static_cast<uint8_t>(byte));
    for (int nibble = 0; nibble < 16; ++nibble) e2m1[nibble] = e2m1_to_float(nibble);
  }
};

inline const DecodeTables& decode_tables() {
  static const DecodeTables tables;
  return tables;
}

class KvReader {
 public:
  // `is_key` picks k/k_scale/k strides or v/v_scale/v strides out of `args`.
  KvReader(const flashmsa_args& args, bool is_key)
      : base_(static_cast<const uint8_t*>(is_key ? args.k : args.v)),
        scale_(is_key ? args.k_scale : args.v_scale),
        dtype_(args.kv_dtype),
        element_bytes_(
            args.kv_dtype == FLASHMSA_DTYPE_BF16 || args.kv_dtype == FLASHMSA_DTYPE_FP16 ? 2 : 1),
        stride_page_(is_key ? args.k_stride_page : args.v_stride_page),
        stride_head_(is_key ? args.k_stride_head : args.v_stride_head),
        stride_token_(is_key ? args.k_stride_token : args.v_stride_token),
        num_kv_heads_(args.num_kv_heads),
        page_local_scales_(args.nvfp4_scale_layout == FLASHMSA_NVFP4_SCALES_PAGE_LOCAL),
        is_key_(is_key),
        scale_stride_page_(is_key ? args.k_scale_stride_page : args.v_scale_stride_page),
        scale_stride_head_(is_key ? args.k_scale_stride_head : args.v_scale_stride_head),
        token_scale_(is_key ? args.k_token_scale : args.v_token_scale),
        token_scale_stride_head_(is_key ? args.k_token_scale_stride_head
                                        : args.v_token_scale_stride_head) {}

  // Row of flat K/V: `token` in [0, total_k). Page-local scales exist only on the paged path.
  void read_flat(int64_t token, int64_t head, float* out) const {
    const uint8_t* row = base_ + (token * stride_token_ + head * stride_head_) * element_bytes_;
    if (dtype_ != FLASHMSA_DTYPE_NVFP4) {
      decode_unscaled(row, out);
      apply_token_scale(head, /*slot=*/token, out);
      return;
    }
    uint8_t scales[kNvfp4ScaleCols];
    read_swizzled_scales(nvfp4_scale_row_flat(token, head, num_kv_heads_), scales);
    decode_nvfp4(row, scales, out);
  }

  // Row of paged K/V: `page` in [0, num_pages), `token_in_page` in [0, 128).
  void read_paged(int64_t page, int64_t head, int64_t token_in_page, float* out) const {
    const uint8_t* row =
        base_ + (page * stride_page_ + head * stride_head_ + token_in_page * stride_token_) *
                    element_bytes_;
    if (dtype_ != FLASHMSA_DTYPE_NVFP4) {
      decode_unscaled(row, out);
      apply_token_scale(head, /*slot=*/page * kBlockSize + token_in_page, out);
      return;
    }
    uint8_t scales[kNvfp4ScaleCols];
    if (page_local_scales_) {
      read_page_local_scales(page, head, token_in_page, scales);
    } else {
      read_swizzled_scales(nvfp4_scale_row_paged(page, head, token_in_page, num_kv_heads_),
                           scales);
    }
    decode_nvfp4(row, scales, out);
  }

 private:
  // The row's E4M3 scale bytes, one per group of 16 elements, from the swizzled table ...
  void read_swizzled_scales(int64_t scale_row, uint8_t* scales) const {
    for (int group = 0; group < kNvfp4ScaleCols; ++group) {
      scales[group] = scale_[nvfp4_scale_offset(scale_row, group)];
    }
  }

  // ... or from the plane of (page, head): linear for K, token-quad order for V.
  void read_page_local_scales(int64_t page, int64_t head, int64_t token_in_page,
                              uint8_t* scales) const {
    const uint8_t* plane = scale_ + page * scale_stride_page_ + head * scale_stride_head_;
    for (int group = 0; group < kNvfp4ScaleCols; ++group) {
      scales[group] = plane[is_key_ ? nvfp4_page_local_key_scale_offset(token_in_page, group)
                                    : nvfp4_page_local_value_scale_offset(token_in_page, group)];
    }
  }

  // Per-token fp8 descales (validation admits them only for fp8): value = e4m3 * scale, the
  // global scale applying later as on every path. Without them the row is left untouched, so
  // that path stays bitwise what it was.
  void apply_token_scale(int64_t head, int64_t slot, float* out) const {
    if (token_scale_ == nullptr) return;
    const float scale = token_scale_[head * token_scale_stride_head_ + slot];
    for (int d = 0; d < kHeadDim; ++d) out[d] *= scale;
  }

  // bf16, fp16 and fp8 rows: each element converts on its own.
  void decode_unscaled(const uint8_t* row, float* out) const {
    if (dtype_ == FLASHMSA_DTYPE_FP8_E4M3) {
      const DecodeTables& tables = decode_tables();
      for (int d = 0; d < kHeadDim; ++d) out[d] = tables.e4m3[row[d]];
      return;
    }
    uint16_t bits[kHeadDim];
    memcpy(bits, row, sizeof(bits));  // no alignment assumption on the caller's strides
    if (dtype_ == FLASHMSA_DTYPE_BF16) {
      for (int d = 0; d < kHeadDim; ++d) out[d] = bf16_to_float(bits[d]);
    } else {
      for (int d = 0; d < kHeadDim; ++d) out[d] = fp16_to_float(bits[d]);
    }
  }

  // A packed NVFP4 row with its scale bytes: value = e2m1 * e4m3 scale.
  void decode_nvfp4(const uint8_t* row, const uint8_t* scale_bytes, float* out) const {
    const DecodeTables& tables = decode_tables();
    for (int group = 0; group < kNvfp4ScaleCols; ++group) {
      const float scale = tables.e4m3[scale_bytes[group]];
      const uint8_t* packed = row + group * (kNvfp4ElementsPerScale / 2);
      float* values = out + group * kNvfp4ElementsPerScale;
      for (int pair = 0; pair < kNvfp4ElementsPerScale / 2; ++pair) {
        values[2 * pair] = tables.e2m1[packed[pair] & 0xF] * scale;  // low nibble: even
        values[2 * pair + 1] = tables.e2m1[packed[pair] >> 4] * scale;
      }
    }
  }

  const uint8_t* base_;
  const uint8_t* scale_;
  flashmsa_dtype dtype_;
  int64_t element_bytes_;
  int64_t stride_page_, stride_head_, stride_token_;
  int64_t num_kv_heads_;
  bool page_local_scales_;
  bool is_key_;  // page-local K and V scales are ordered differently
  int64_t scale_stride_page_, scale_stride_head_;
  const float* token_scale_;  // (Hkv, slots) fp8 descales, NULL when not given
  int64_t token_scale_stride_head_;
};

}  // namespace cpu
}  // namespace flashmsa
