// NVFP4 K/V (KvFormat::kNvfp4) converted in registers on their way into the products, or
// from a raw stage into a full stage of q's dtype in shared memory (the union tile), and the
// block scales the producers stage beside each block for it (contract section 6).
//
// A value is e2m1 * scale: an E2M1 magnitude (0, 0.5, 1, 1.5, 2, 3, 4, 6) has two significant
// bits and an E4M3 scale four, so their product is exact in bf16 and fp16 (at most six bits,
// 2^-10 .. 2688), and the products see exactly the contract's values; q is never quantized.
//
// How: one byte permute looks four E2M1 magnitudes up in an 8-entry table of bytes
// (kE2m1Bytes*: each magnitude as 0 eeee m00 with exponent bias 13, so that placed at bits
// 4-11 of a bf16 or bits 7-14 of an fp16 it reads as the magnitude times 2^-114 or 2^-2), a
// second permute pairs two of them with their signs, and then, as for fp8 (kv_convert.cuh:
// e4m3_signed_pair), one multiply-shift and one mask place them, and one multiply by the pair's
// block scales (times 2^114 or 4, kept in the multiplier) gives the exact values.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "common/nvfp4.h"
#include "sm90/kernel_traits.h"
#include "sm90/kv_convert.cuh"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/ptx.cuh"

namespace flashmsa::sm90 {

// The table: E2M1 magnitude index (the nibble's low three bits) -> byte.
constexpr uint32_t kE2m1BytesLow = 0x6C686000u;   // 0, 0.5, 1, 1.5
constexpr uint32_t kE2m1BytesHigh = 0x7C787470u;  // 2, 3, 4, 6

// Nibbles 0..3 of `nibbles` (bits 0-15; higher bits are ignored) -> their magnitudes' bytes.
__device__ __forceinline__ uint32_t e2m1_magnitude_bytes(uint32_t nibbles) {
  return byte_permute(kE2m1BytesLow, kE2m1BytesHigh, nibbles & 0x7777u);
}

// Two placed magnitudes with their signs, [m0, s0, m1, s1], where s0 and s1 are bytes whose bit
// 3 (bf16) or every bit (fp16) is the value's sign, as a pair of Element times its multiplier
// pair (each value's block scale, times 2^114 for bf16, 4 for fp16: nvfp4_multipliers). Exact.
template <typename Element>
__device__ __forceinline__ uint32_t nvfp4_pair(uint32_t signed_bytes, uint32_t multipliers) {
  if constexpr (std::is_same_v<Element, __half>) {
    const uint32_t bits = (signed_bytes * 128u) & 0xbf80bf80u;
    const __half2 value = __hmul2(*reinterpret_cast<const __half2*>(&bits),
                                  *reinterpret_cast<const __half2*>(&multipliers));
    return *reinterpret_cast<const uint32_t*>(&value);
  } else {
    const uint32_t bits = (signed_bytes * 16u) & 0x87f087f0u;
    const __nv_bfloat162 value = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits),
                                         *reinterpret_cast<const __nv_bfloat162*>(&multipliers));
    return *reinterpret_cast<const uint32_t*>(&value);
  }
}

// Two E4M3 scale bytes (bits 0-7 and 8-15) -> the multiplier pair of nvfp4_pair, exactly (the
// conversion of kv_convert.cuh's e4m3_signed_pair, then the factor; the NaN bytes read as
// +-480 there too).
template <typename Element>
__device__ __forceinline__ uint32_t nvfp4_multipliers(uint32_t two_scales) {
  const uint32_t signed_bytes = byte_permute(two_scales, 0u, 0x9180u);
  if constexpr (std::is_same_v<Element, __half>) {
    const uint32_t bits = (signed_bytes * 128u) & 0xbf80bf80u;
    const __half2 value = __hmul2(*reinterpret_cast<const __half2*>(&bits),
                                  __half2(__float2half(1024.f), __float2half(1024.f)));
    return *reinterpret_cast<const uint32_t*>(&value);
  } else {
    const uint32_t bits = (signed_bytes * 16u) & 0x87f087f0u;
    __nv_bfloat162 value = __hmul2(
        *reinterpret_cast<const __nv_bfloat162*>(&bits),
        __nv_bfloat162(__float2bfloat16(0x1p120f), __float2bfloat16(0x1p120f)));
    value = __hmul2(value, __nv_bfloat162(__float2bfloat16(0x1p114f), __float2bfloat16(0x1p114f)));
    return *reinterpret_cast<const uint32_t*>(&value);
  }
}

// Both halves the low (kHigh = false) or high half of a multiplier pair.
template <bool kHigh>
__device__ __forceinline__ uint32_t broadcast_half(uint32_t pair) {
  return byte_permute(pair, 0u, kHigh ? 0x3232u : 0x1010u);
}

// The eight values of one packed word (element 2i in byte i's low nibble), pairs (0, 1),
// (2, 3), (4, 5), (6, 7) as Element pairs, elements 0-3 scaled by the low multiplier pair,
// 4-7 by the high one (the caller's choice of scales a pair: one value's block each).
template <typename Element>
struct Nvfp4Word {
  uint32_t pair[4];
};

template <typename Element>
__device__ __forceinline__ Nvfp4Word<Element> convert_nvfp4_word(uint32_t word,
                                                                 uint32_t low_multipliers,
                                                                 uint32_t high_multipliers) {
  // One mask serves both lookups (the permute reads only its selector's low 16 bits).
  const uint32_t selectors = word & 0x77777777u;
  const uint32_t low = byte_permute(kE2m1BytesLow, kE2m1BytesHigh, selectors);
  const uint32_t high = byte_permute(kE2m1BytesLow, kE2m1BytesHigh, selectors >> 16);
  Nvfp4Word<Element> out;
  if constexpr (std::is_same_v<Element, __half>) {
    // Sign bytes (0xff or 0) of elements 0-3 and 4-7: byte i's bit 3 and bit 7 replicated.
    const uint32_t shifted = word << 4;
    const uint32_t signs_low = byte_permute(shifted, word, 0xd9c8u);
    const uint32_t signs_high = byte_permute(shifted, word, 0xfbeau);
    out.pair[0] = nvfp4_pair<Element>(byte_permute(low, signs_low, 0x5140u), low_multipliers);
    out.pair[1] = nvfp4_pair<Element>(byte_permute(low, signs_low, 0x7362u), low_multipliers);
    out.pair[2] = nvfp4_pair<Element>(byte_permute(high, signs_high, 0x5140u), high_multipliers);
    out.pair[3] = nvfp4_pair<Element>(byte_permute(high, signs_high, 0x7362u), high_multipliers);
  } else {
    // Byte 1 is the packed byte itself (its bit 3: element 2i's sign), byte 3 its bit 7
    // replicated (element 2i + 1's): nvfp4_pair's mask keeps only those bits.
    out.pair[0] = nvfp4_pair<Element>(byte_permute(low, word, 0xc140u), low_multipliers);
    out.pair[1] = nvfp4_pair<Element>(byte_permute(low, word, 0xd352u), low_multipliers);
    out.pair[2] = nvfp4_pair<Element>(byte_permute(high, word, 0xe160u), high_multipliers);
    out.pair[3] = nvfp4_pair<Element>(byte_permute(high, word, 0xf372u), high_multipliers);
  }
  return out;
}

// Two rows' values of the same four dims: `interleaved` holds byte j of row 0, byte j of row 1
// (bits 0-15: dims 2j, 2j + 1 of each), and the result is the pairs (row 0, row 1) of dim 2j
// (first) and of dim 2j + 1, scaled by `multipliers` (row 0's scale low, row 1's high).
template <typename Element>
__device__ __forceinline__ void convert_nvfp4_row_pairs(uint32_t interleaved, uint32_t multipliers,
                                                        uint32_t& even_dim, uint32_t& odd_dim) {
  const uint32_t magnitudes = e2m1_magnitude_bytes(interleaved);
  if constexpr (std::is_same_v<Element, __half>) {
    const uint32_t signs = byte_permute(interleaved << 4, interleaved, 0xd9c8u);
    even_dim = nvfp4_pair<Element>(byte_permute(magnitudes, signs, 0x6240u), multipliers);
    odd_dim = nvfp4_pair<Element>(byte_permute(magnitudes, signs, 0x7351u), multipliers);
  } else {
    even_dim = nvfp4_pair<Element>(byte_permute(magnitudes, interleaved, 0x5240u), multipliers);
    odd_dim = nvfp4_pair<Element>(byte_permute(magnitudes, interleaved, 0xd3c1u), multipliers);
  }
}

// ---------------------------------------------------------------------------------------------
// Block scales: where a block's scale bytes are, in each of the contract's forms.
// ---------------------------------------------------------------------------------------------

// One operand's scales of one block: swizzled tables (paged: the block's 1 KiB tile at `base`;
// flat: the table, rows (first_token + t) * Hkv + head) or a page-local plane at `base`.
struct Nvfp4BlockScales {
  const uint8_t* base;
  int64_t first_row;  // flat swizzled: the scale row of key 0; -1 otherwise
  int32_t row_stride;  // flat swizzled: Hkv
  bool page_local;
  int valid_keys;      // keys at or past it read no scale (scale 0)
};

__device__ __forceinline__ Nvfp4BlockScales nvfp4_block_scales(const AttentionParams& p,
                                                               bool value, int32_t coord,
                                                               int kv_head, int valid_keys) {
  const uint8_t* table = value ? p.v_block_scale : p.k_block_scale;
  Nvfp4BlockScales b{table, -1, p.num_kv_heads, p.nvfp4_page_local != 0, valid_keys};
  if (b.page_local) {
    b.base += coord * (value ? p.v_block_scale_stride_page : p.k_block_scale_stride_page) +
              kv_head * (value ? p.v_block_scale_stride_head : p.k_block_scale_stride_head);
  } else if (p.is_paged) {
    b.base += nvfp4_scale_offset(nvfp4_scale_row_paged(coord, kv_head, 0, p.num_kv_heads), 0);
  } else {
    b.first_row = nvfp4_scale_row_flat(coord, kv_head, p.num_kv_heads);
  }
  return b;
}

// Byte offset of scale (key, col) within a swizzled 128-row tile.
__device__ __forceinline__ int swizzled_tile_offset(int key, int col) {
  return (col / 4) * 512 + (key % 32) * 16 + (key / 32) * 4 + col % 4;
}

__device__ __forceinline__ const uint8_t* swizzled_row(const Nvfp4BlockScales& b, int key) {
  if (b.first_row < 0) return b.base + swizzled_tile_offset(key, 0);
  const int64_t row = b.first_row + static_cast<int64_t>(key) * b.row_stride;
  return b.base + nvfp4_scale_offset(row, 0);
}

// ---------------------------------------------------------------------------------------------
// Staged scales: consumers loading every block's scales themselves put a round trip on each
// block's chain (eight times over in the token-warp kernel), so the producers stage them beside
// the block instead, a stage ahead like the data (producer.cuh: stage_scales_beside_blocks).
// ---------------------------------------------------------------------------------------------

// Staged order: linear (byte key * 8 + col) for K and for V from the swizzled table; V from
// page-local planes keeps their token-quad order (byte (key / 4) * 32 + col * 4 + key % 4).
// Lane l copies keys 4l .. 4l + 3 (32 bytes) as 4-byte words, zero past the request's end.
__device__ __forceinline__ void stage_operand_scales(const Nvfp4BlockScales& b, bool value,
                                                     uint8_t* staged) {
  const int lane = threadIdx.x % 32;
  uint8_t* destination = staged + 32 * lane;
  if (value && b.page_local) {  // a quad's column is one word, its keys in order
    const int valid = min(max(b.valid_keys - 4 * lane, 0), 4);
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      copy_word_async(destination + 4 * w, b.base + 32 * lane + 4 * w, valid);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = 4 * lane + i;
    const bool valid = key < b.valid_keys;
    const uint8_t* row = !valid        ? b.base
                         : b.page_local ? b.base + nvfp4_page_local_key_scale_offset(key, 0)
                                        : swizzled_row(b, key);
    const int high = b.page_local ? 4 : 512;  // columns 4-7
    copy_word_async(destination + 8 * i, row, valid ? 4 : 0);
    copy_word_async(destination + 8 * i + 4, valid ? row + high : row, valid ? 4 : 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Rewritten (the two-consumer union tile: producer_converts, kernel_traits.h). A block's packed
// rows land in a compact stage of the raw ring, and the producer warpgroup's converter warps
// write them into a full 32 KiB stage as q's dtype, in the native two-panel layout that its
// wgmma read (kv_convert.cuh), a unit of 32 dims (one 16-byte packed chunk, two scale
// columns) at a time.
// ---------------------------------------------------------------------------------------------

// Unit (row, chunk): packed dims 32 chunk .. 32 chunk + 31 as four 16-byte chunks of Element
// at `row_start` (the row in the chunk's panel), chunk c' at swizzled position c' ^ swizzle;
// dims 32 chunk .. + 15 scaled by the low scale byte, the rest by the high one.
template <typename Element>
__device__ __forceinline__ void store_converted_unit(uint8_t* row_start, int first_chunk,
                                                     int swizzle, const uint4& packed,
                                                     uint32_t scales) {
  const uint32_t multipliers = nvfp4_multipliers<Element>(scales);
  const uint32_t low = broadcast_half<false>(multipliers);
  const uint32_t high = broadcast_half<true>(multipliers);
  const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const uint32_t m = w < 2 ? low : high;
    const Nvfp4Word<Element> v = convert_nvfp4_word<Element>(words[w], m, m);
    *reinterpret_cast<uint4*>(row_start + (((first_chunk + w) ^ swizzle) * 16)) =
        make_uint4(v.pair[0], v.pair[1], v.pair[2], v.pair[3]);
  }
}

// One operand's landed block (`packed_rows`, 64 bytes a key) with its staged scales into
// `stage`, by the kConverterThreads converter threads (`worker` 0 .. kConverterThreads - 1).
// A thread keeps one chunk (32 dims) and takes every kRowStep-th row: the rows' swizzle (row %
// 8) and key quad position stay the thread's, so only the row offsets move. A warp's loads
// read 512 consecutive bytes; its stores fall four to a bank group (the swizzle spreads a
// chunk's eight rows). Staged scales: linear (two bytes a chunk, at key * 8 + 2 chunk), or, for
// V from page-local planes (token_quads), a byte at (key / 4) * 32 + key % 4 + 8 chunk and the
// next column's four bytes on.
template <typename Element>
__device__ __forceinline__ void convert_nvfp4_block(const uint8_t* packed_rows,
                                                    const uint8_t* staged_scales,
                                                    bool token_quads, uint8_t* stage, int worker) {
  constexpr int kRowStep = kConverterThreads / 4;
  static_assert(kRowStep % 8 == 0, "a thread's rows keep one swizzle and one key quad position");
  const int chunk = worker % 4, first_row = worker / 4;
  const int swizzle = first_row % 8;
  const uint8_t* packed = packed_rows + first_row * kNvfp4RowBytes + chunk * 16;
  uint8_t* row_start = stage + (chunk / 2) * kKvPanelBytes + first_row * 128;
  const uint8_t* scales =
      staged_scales + (token_quads ? (first_row / 4) * 32 + first_row % 4 + 8 * chunk
                                   : first_row * 8 + 2 * chunk);
#pragma unroll 2
  for (int row = first_row; row < kBlockKeys; row += kRowStep) {
    const uint32_t scale_pair = token_quads
                                    ? scales[0] | (static_cast<uint32_t>(scales[4]) << 8)
                                    : *reinterpret_cast<const uint16_t*>(scales);
    store_converted_unit<Element>(row_start, 4 * (chunk % 2), swizzle,
                                  *reinterpret_cast<const uint4*>(packed), scale_pair);
    packed += kRowStep * kNvfp4RowBytes;
    row_start += kRowStep * 128;
    scales += kRowStep * 8;  // eight bytes a key in both orders (kRowStep is whole quads)
  }
}

}  // namespace flashmsa::sm90
