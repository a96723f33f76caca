// Reading K or V rows of any supported dtype and layout into fp32, for the CPU reference.
//
// One "row" is the head_dim values of one (token, KV head). The reader hides the layout (flat or
// paged, any strides) and the storage (bf16, fp16, fp8 E4M3, NVFP4 with swizzled block scales)
// behind one call, so that the attention code sees only fp32 rows and a flat and a paged call on
// the same logical data decode to bitwise identical values.
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
        num_kv_heads_(args.num_kv_heads) {}

  // Row of flat K/V: `token` in [0, total_k).
  void read_flat(int64_t token, int64_t head, float* out) const {
    const int64_t element = token * stride_token_ + head * stride_head_;
    decode(base_ + element * element_bytes_, nvfp4_scale_row_flat(token, head, num_kv_heads_), out);
  }

  // Row of paged K/V: `page` in [0, num_pages), `token_in_page` in [0, 128).
  void read_paged(int64_t page, int64_t head, int64_t token_in_page, float* out) const {
    const int64_t element =
        page * stride_page_ + head * stride_head_ + token_in_page * stride_token_;
    decode(base_ + element * element_bytes_,
           nvfp4_scale_row_paged(page, head, token_in_page, num_kv_heads_), out);
  }

 private:
  // `scale_row` is the row's index in the NVFP4 scale layout (unused for other dtypes).
  void decode(const uint8_t* row, int64_t scale_row, float* out) const {
    switch (dtype_) {
      case FLASHMSA_DTYPE_BF16:
      case FLASHMSA_DTYPE_FP16: {
        uint16_t bits[kHeadDim];
        memcpy(bits, row, sizeof(bits));  // no alignment assumption on the caller's strides
        if (dtype_ == FLASHMSA_DTYPE_BF16) {
          for (int d = 0; d < kHeadDim; ++d) out[d] = bf16_to_float(bits[d]);
        } else {
          for (int d = 0; d < kHeadDim; ++d) out[d] = fp16_to_float(bits[d]);
        }
        return;
      }
      case FLASHMSA_DTYPE_FP8_E4M3: {
        const DecodeTables& tables = decode_tables();
        for (int d = 0; d < kHeadDim; ++d) out[d] = tables.e4m3[row[d]];
        return;
      }
      case FLASHMSA_DTYPE_NVFP4: {
        const DecodeTables& tables = decode_tables();
        for (int group = 0; group < kNvfp4ScaleCols; ++group) {
          const float scale = tables.e4m3[scale_[nvfp4_scale_offset(scale_row, group)]];
          const uint8_t* packed = row + group * (kNvfp4ElementsPerScale / 2);
          float* values = out + group * kNvfp4ElementsPerScale;
          for (int pair = 0; pair < kNvfp4ElementsPerScale / 2; ++pair) {
            values[2 * pair] = tables.e2m1[packed[pair] & 0xF] * scale;  // low nibble: even
            values[2 * pair + 1] = tables.e2m1[packed[pair] >> 4] * scale;
          }
        }
        return;
      }
    }
  }

  const uint8_t* base_;
  const uint8_t* scale_;
  flashmsa_dtype dtype_;
  int64_t element_bytes_;
  int64_t stride_page_, stride_head_, stride_token_;
  int64_t num_kv_heads_;
};

}  // namespace cpu
}  // namespace flashmsa
