// The converter threads of a converted K/V format (KvFormat::kFp8): warps 1-3 of the producer
// warpgroup rewrite each stage, once its TMA bytes have landed, as q's dtype in the layout the
// consumers read, then complete the stage's full barrier. The consumers' code is the same for
// every format.
//
// fp8 E4M3 -> bf16 or fp16 is exact (E4M3's 4 exponent and 3 mantissa bits, subnormals
// included, fit both), so the products see exactly the values of the contract's section 6; q is
// never quantized.
//
// In place: the fp8 block (128 rows of 128 bytes, one 128B-swizzled box) lands in the upper
// 16 KiB of the 32 KiB stage, which is where the converted block's second panel (head dims
// 64-127) goes. One thread rewrites a whole row in dim order, 8 dims at a time: dims 0-63
// become panel 0's row (the stage's lower half, free), dims 64-127 panel 1's, whose row
// occupies the same 128 bytes as the fp8 row. Converted chunk c' of panel 1 (dims 64 + 8c' ..)
// lands at swizzled position c' ^ (row % 8), where fp8 chunk c' (dims 16c' ..) sits; it is
// written after dims 64 + 8c' .. + 7 are read, and 64 + 8c' >= 16c' + 15 for every c' <= 7, so
// that fp8 chunk was read already. No thread touches another's row: the rewrite needs no
// barrier.
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

// Two E4M3 values (the low 16 bits, element 0 in the low byte) as a packed pair of Element,
// element 0 in the low half. fp16: one conversion instruction; bf16 through fp32 (both steps
// exact for E4M3 values).
template <typename Element>
__device__ __forceinline__ uint32_t convert_e4m3_pair(uint32_t two_e4m3) {
  const __half2_raw half_pair =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_e4m3), __NV_E4M3);
  if constexpr (std::is_same_v<Element, __half>) {
    return static_cast<uint32_t>(half_pair.x) | (static_cast<uint32_t>(half_pair.y) << 16);
  } else {
    const float2 wide = __half22float2(__half2(half_pair));
    const __nv_bfloat162 pair = __floats2bfloat162_rn(wide.x, wide.y);
    return *reinterpret_cast<const uint32_t*>(&pair);
  }
}

// Eight E4M3 values (two words, element 0 lowest) as one 16-byte chunk of Element.
template <typename Element>
__device__ __forceinline__ uint4 convert_e4m3_chunk(uint32_t low, uint32_t high) {
  return make_uint4(convert_e4m3_pair<Element>(low & 0xffffu), convert_e4m3_pair<Element>(low >> 16),
                    convert_e4m3_pair<Element>(high & 0xffffu),
                    convert_e4m3_pair<Element>(high >> 16));
}

// Row `row` of a landed fp8 stage, rewritten in place as Element (see the file comment), eight
// dims (half an fp8 chunk, one converted chunk) a piece, kPiecesInFlight pieces unrolled so that
// their loads overlap their conversions: 4 for the converter warps (what their registers hold),
// all 16 for the decode kernel's consumer warps.
template <typename Element, int kPiecesInFlight = 4>
__device__ __forceinline__ void convert_fp8_row(uint8_t* stage, int row) {
  const int swizzle = row % 8;
  const uint8_t* fp8_row = stage + kKvPanelBytes + row * 128;
#pragma unroll kPiecesInFlight
  for (int piece = 0; piece < 16; ++piece) {
    const uint2 packed = *reinterpret_cast<const uint2*>(
        fp8_row + (((piece / 2) ^ swizzle) * 16) + (piece % 2) * 8);
    uint8_t* converted_row = stage + (piece / 8) * kKvPanelBytes + row * 128;
    *reinterpret_cast<uint4*>(converted_row + (((piece % 8) ^ swizzle) * 16)) =
        convert_e4m3_chunk<Element>(packed.x, packed.y);
  }
}

// A stage's 128 rows over the 96 converter threads: `converter` takes row converter, and
// converter + 96 where that exists. `first` rotates which threads take the second row, so that
// K and V of a block load different warps.
template <typename Element>
__device__ __forceinline__ void convert_fp8_stage(uint8_t* stage, int converter, int first) {
  int row = converter - first;
  if (row < 0) row += kConverterThreads;
  convert_fp8_row<Element>(stage, row);
  if (row + kConverterThreads < kBlockKeys) convert_fp8_row<Element>(stage, row + kConverterThreads);
}

// Threads 32..127: K(i) then V(i) for each step of the slice, in the producer's ring order.
// Each thread fences its own stores into the async proxy (wgmma reads them) before it arrives.
template <typename Element, KvFormat kKv>
__device__ inline void convert_stages(const AttentionParams& p, const Smem& smem,
                                      const TilePlan& plan) {
  static_assert(kKv == KvFormat::kFp8, "the converter handles fp8 K/V");
  const int converter = threadIdx.x - 32;
  const int num_stages = p.smem_layout.num_stages;
  SmemHeader& header = smem.header();
  const int steps = plan.slice_end - plan.slice_begin;
  RingCursor ring;
  for (int i = 0; i < steps; ++i, ring.advance(num_stages)) {
    mbarrier_wait(&header.k_landed[ring.stage], ring.phase);
    convert_fp8_stage<Element>(smem.k(ring.stage), converter, 0);
    fence_proxy_async_shared();
    mbarrier_arrive(&header.k_full[ring.stage]);
    mbarrier_wait(&header.v_landed[ring.stage], ring.phase);
    convert_fp8_stage<Element>(smem.v(ring.stage), converter, 64);
    fence_proxy_async_shared();
    mbarrier_arrive(&header.v_full[ring.stage]);
  }
}

}  // namespace flashmsa::sm90
