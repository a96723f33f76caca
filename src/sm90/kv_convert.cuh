// fp8 E4M3 K/V (KvFormat::kFp8) rewritten in shared memory as q's dtype in the layout the
// native format lands in, so that the products are the native ones.
//
// fp8 E4M3 -> bf16 or fp16 is exact (E4M3's 4 exponent and 3 mantissa bits, subnormals
// included, fit both), so the products see exactly the values of the contract's section 6; q is
// never quantized.
//
// In place: the fp8 block (128 rows of 128 bytes, one 128B-swizzled box) lands in the upper
// 16 KiB of the 32 KiB stage, which is where the converted block's second panel (head dims
// 64-127) goes. A row rewritten in dim order, 8 dims at a time, needs nothing but its own bytes:
// dims 0-63 become panel 0's row (the stage's lower half, free), dims 64-127 panel 1's, whose
// row occupies the same 128 bytes as the fp8 row. Converted chunk c' of panel 1 (dims 64 + 8c'
// ..) lands at swizzled position c' ^ (row % 8), where fp8 chunk c' (dims 16c' ..) sits; it is
// written after dims 64 + 8c' .. + 7 are read, and 64 + 8c' >= 16c' + 15 for every c' <= 7, so
// that fp8 chunk was read already. The union tile's consumer warpgroups convert both operands
// between a stage's landing and their first read. The other consumers take the fp8 bytes into
// their products in registers (decode_consumer.cuh, token_warp_consumer.cuh) through
// e4m3_signed_pair below.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

#include "sm90/kernel_traits.h"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/ptx.cuh"

namespace flashmsa::sm90 {

// Two E4M3 values (the low 16 bits of `two_e4m3`, element 0 in the low byte) as fp16, element
// 0 in the low half: one conversion instruction.
__device__ __forceinline__ uint32_t e4m3_pair_to_half2(uint32_t two_e4m3) {
  const __half2_raw pair =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_e4m3), __NV_E4M3);
  return static_cast<uint32_t>(pair.x) | (static_cast<uint32_t>(pair.y) << 16);
}

// Bytes `low` and `high` of `four_e4m3` (selected by the byte permutation below) as bf16, in
// integer instructions and one multiply: the conversion unit (16 results a clock per SM, two of
// its instructions a value through fp16 and fp32) held fp8 prefill at half the bf16 speed.
// An E4M3 byte s eeee mmm placed as s . eeee mmm 0000 in a 16-bit half is the bf16 of its value
// times 2^-120 (the exponent biases are 7 and 127), subnormals included (bf16 subnormals); the
// multiply by 2^120 is exact. The two NaN bytes (0x7f, 0xff) read as +-480.
template <uint32_t kSelector>
__device__ __forceinline__ uint32_t e4m3_pair_to_bfloat162(uint32_t four_e4m3) {
  const uint32_t placed = __byte_perm(four_e4m3, 0u, kSelector);  // bytes [0, low, 0, high]
  const uint32_t bits = ((placed >> 4) & 0x07f007f0u) | (placed & 0x80008000u);
  __nv_bfloat162 scaled = *reinterpret_cast<const __nv_bfloat162*>(&bits);
  scaled = __hmul2(scaled, __nv_bfloat162(__float2bfloat16(0x1p120f), __float2bfloat16(0x1p120f)));
  return *reinterpret_cast<const uint32_t*>(&scaled);
}

// PTX's byte permute with its sign mode: a selector nibble's bit 3 makes the result byte the
// selected byte's sign bit, replicated (__byte_perm's selectors have no such bit).
__device__ __forceinline__ uint32_t byte_permute(uint32_t low, uint32_t high, uint32_t selector) {
  uint32_t result;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(result) : "r"(low), "r"(high), "r"(selector));
  return result;
}

// Two E4M3 bytes b0, b1 permuted as [b0, sign of b0, b1, sign of b1] (byte_permute's sign mode)
// as a pair of Element: shifted so that each byte's exponent and mantissa land in a 16-bit
// half's fields, one mask keeps those and the sign, and the multiply rescales exactly. Two
// instructions on the integer pipe (the permute and the mask; the shift is a multiply, on the
// FMA pipe like the rescale) where e4m3_pair_to_bfloat162 takes four: a consumer converting
// every operand in registers is bound by that pipe (token_warp_consumer.cuh). fp16 the same way
// (s 0 eeee mmm 0000000 is the fp16 of the value times 2^-8), rather than through the conversion
// unit, whose rate would bound it as well. The NaN bytes read as +-480 here too.
template <typename Element>
__device__ __forceinline__ uint32_t e4m3_signed_pair(uint32_t signed_bytes) {
  if constexpr (std::is_same_v<Element, __half>) {
    // Byte bits 7..14 of each half, the replicated sign at 15: s 0 eeee mmm 0000000.
    const uint32_t bits = (signed_bytes * 128u) & 0xbf80bf80u;
    __half2 scaled = *reinterpret_cast<const __half2*>(&bits);
    scaled = __hmul2(scaled, __half2(__float2half(256.f), __float2half(256.f)));
    return *reinterpret_cast<const uint32_t*>(&scaled);
  } else {
    // Byte bits 4..11 of each half, the replicated sign at 15: s 000 eeee mmm 0000.
    const uint32_t bits = (signed_bytes * 16u) & 0x87f087f0u;
    __nv_bfloat162 scaled = *reinterpret_cast<const __nv_bfloat162*>(&bits);
    scaled =
        __hmul2(scaled, __nv_bfloat162(__float2bfloat16(0x1p120f), __float2bfloat16(0x1p120f)));
    return *reinterpret_cast<const uint32_t*>(&scaled);
  }
}

// Bytes 0 and 1 (kLow = true) or 2 and 3 of a word of four E4M3 values as a pair of Element.
template <typename Element, bool kLow>
__device__ __forceinline__ uint32_t convert_e4m3_word_half(uint32_t four_e4m3) {
  if constexpr (std::is_same_v<Element, __half>) {
    return e4m3_pair_to_half2(kLow ? (four_e4m3 & 0xffffu) : (four_e4m3 >> 16));
  } else {
    return e4m3_pair_to_bfloat162<kLow ? 0x1404u : 0x3424u>(four_e4m3);
  }
}

// Eight E4M3 values (two words, element 0 lowest) as one 16-byte chunk of Element.
template <typename Element>
__device__ __forceinline__ uint4 convert_e4m3_chunk(uint32_t low, uint32_t high) {
  return make_uint4(convert_e4m3_word_half<Element, true>(low),
                    convert_e4m3_word_half<Element, false>(low),
                    convert_e4m3_word_half<Element, true>(high),
                    convert_e4m3_word_half<Element, false>(high));
}

// Row `row` of a landed fp8 stage, rewritten in place as Element (see the file comment), eight
// dims (half an fp8 chunk, one converted chunk) a piece, four pieces unrolled so that their
// loads overlap their conversions: the accumulators, live across this, leave the consumers few
// registers.
template <typename Element>
__device__ __forceinline__ void convert_fp8_row(uint8_t* stage, int row) {
  const int swizzle = row % 8;
  const uint8_t* fp8_row = stage + kKvPanelBytes + row * 128;
#pragma unroll 4
  for (int piece = 0; piece < 16; ++piece) {
    const uint2 packed = *reinterpret_cast<const uint2*>(
        fp8_row + (((piece / 2) ^ swizzle) * 16) + (piece % 2) * 8);
    uint8_t* converted_row = stage + (piece / 8) * kKvPanelBytes + row * 128;
    *reinterpret_cast<uint4*>(converted_row + (((piece % 8) ^ swizzle) * 16)) =
        convert_e4m3_chunk<Element>(packed.x, packed.y);
  }
}

// A block's landed fp8 K and V stages rewritten by the prefill kernel's consumer warpgroups,
// which both read all of them (wgmma), a row a thread: one warpgroup rewrites K's rows then V's;
// two split them, warpgroup 0 K, warpgroup 1 V. Then every writer fences its stores into the
// async proxy (wgmma reads them) and the warpgroups meet at one barrier, after which both stages
// are q's dtype in the native layout.
template <typename Element, int kConsumers>
__device__ __forceinline__ void convert_block_by_consumers(uint8_t* k_stage, uint8_t* v_stage) {
  const int thread = threadIdx.x - 128;  // 0 .. 128 * kConsumers - 1
  if constexpr (kConsumers == 1) {
    convert_fp8_row<Element>(k_stage, thread);
    convert_fp8_row<Element>(v_stage, thread);
    fence_proxy_async_shared();
    named_barrier_sync(kConsumerBarrier, 128);
  } else {
    convert_fp8_row<Element>(thread < 128 ? k_stage : v_stage, thread % 128);
    fence_proxy_async_shared();
    named_barrier_sync(kBothConsumersBarrier, 256);
  }
}

}  // namespace flashmsa::sm90
