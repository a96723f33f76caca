// wgmma for the two products of a 64-row warpgroup tile against one 128-key block:
//   S = Q K^T : A = Q (smem, K-major), B = K (smem, K-major), 64 x 128 fp32 accumulator;
//   O += P V  : A = P (registers, 16-bit), B = V (smem, keys x head dim: MN-major).
// Each is 8 wgmma k-steps of 16. The instruction wrappers come from CuTe's SM90 GMMA atoms.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>
#include <utility>

#include <cute/arch/mma_sm90_gmma.hpp>

#include "sm90/kernel_traits.h"
#include "sm90/ptx.cuh"

namespace flashmsa::sm90 {

namespace gmma = cute::SM90::GMMA;

template <typename Element>
struct MmaAtoms;

template <>
struct MmaAtoms<__nv_bfloat16> {
  using QK = gmma::MMA_64x128x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::K>;
  using PV = gmma::MMA_64x128x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::MN>;
  __device__ __forceinline__ static uint32_t pack(float low, float high) {
    __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
    return *reinterpret_cast<uint32_t*>(&pair);
  }
};

template <>
struct MmaAtoms<__half> {
  using QK = gmma::MMA_64x128x16_F32F16F16_SS<gmma::Major::K, gmma::Major::K>;
  using PV = gmma::MMA_64x128x16_F32F16F16_RS<gmma::Major::K, gmma::Major::MN>;
  __device__ __forceinline__ static uint32_t pack(float low, float high) {
    __half2 pair = __floats2half2_rn(low, high);
    return *reinterpret_cast<uint32_t*>(&pair);
  }
};

// The 64-register accumulator of an m64n128 wgmma, per thread: element 4*j + 2*h + c sits at
// row (warp % 4) * 16 + lane / 4 + 8 * h, column 8 * j + 2 * (lane % 4) + c.
using Accumulator = float[64];

template <typename Atom, size_t... I>
__device__ __forceinline__ void wgmma_ss(uint64_t a, uint64_t b, Accumulator& d,
                                         gmma::ScaleOut scale, std::index_sequence<I...>) {
  Atom::fma(a, b, d[I]..., scale);
}

template <typename Atom, size_t... I>
__device__ __forceinline__ void wgmma_rs(const uint32_t (&a)[4], uint64_t b, Accumulator& d,
                                         std::index_sequence<I...>) {
  Atom::fma(a[0], a[1], a[2], a[3], b, d[I]..., gmma::ScaleOut::One);
}

// Pins registers that an in-flight wgmma reads or writes: without it the compiler may move
// accesses across the asynchronous instruction or reuse the registers of a dead-looking operand.
__device__ __forceinline__ void fence_accumulator(Accumulator& d) {
#pragma unroll
  for (int i = 0; i < 64; ++i) cute::warpgroup_fence_operand(d[i]);
}

__device__ __forceinline__ void fence_fragment(uint32_t (&a)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) cute::warpgroup_fence_operand(a[i]);
}

// S = Q K^T over head_dim 128. q_smem: two 8 KiB panels (64 rows x 64 dims); k_smem: two
// 16 KiB panels (128 keys x 64 dims). Stepping 16 dims = 32 bytes inside a swizzled row is
// done on the start address; the hardware applies the swizzle to the final address.
// Both products are issued asynchronously as one wgmma commit group each; the caller waits with
// cute::warpgroup_wait<N>() (groups complete in issue order) and then fences the accumulator.
template <typename Element>
__device__ __forceinline__ void issue_scores(uint32_t q_smem, uint32_t k_smem, Accumulator& s) {
  fence_accumulator(s);
  cute::warpgroup_arrive();
#pragma unroll
  for (int step = 0; step < kHeadDim / 16; ++step) {
    const uint32_t panel = step / 4, column_bytes = (step % 4) * 32;
    wgmma_ss<typename MmaAtoms<Element>::QK>(
        kmajor_descriptor(q_smem + panel * kQPanelBytes + column_bytes),
        kmajor_descriptor(k_smem + panel * kKvPanelBytes + column_bytes), s,
        step == 0 ? gmma::ScaleOut::Zero : gmma::ScaleOut::One, std::make_index_sequence<64>{});
  }
  cute::warpgroup_commit_batch();
}

// O += P V. p holds the probabilities of 16 keys per step in the A-fragment order, which is the
// accumulator order of S (so no shuffles are needed). V's step of 16 keys is 2 swizzle atoms.
template <typename Element>
__device__ __forceinline__ void issue_values(const uint32_t (&p)[32], uint32_t v_smem,
                                             Accumulator& o) {
  fence_accumulator(o);
  cute::warpgroup_arrive();
#pragma unroll
  for (int step = 0; step < kBlockKeys / 16; ++step) {
    const uint32_t a[4] = {p[4 * step], p[4 * step + 1], p[4 * step + 2], p[4 * step + 3]};
    wgmma_rs<typename MmaAtoms<Element>::PV>(
        a, mnmajor_descriptor(v_smem + step * 16 * 128, kKvPanelBytes), o,
        std::make_index_sequence<64>{});
  }
  cute::warpgroup_commit_batch();
}

// Warp-level products for the one-token decode consumer (decode_consumer.cuh): its 16 rows are
// one mma.sync m16n8k16 row tile, so each warp takes a quarter of a block's keys instead of the
// warpgroup computing 64 rows of which 48 would be empty.
// D (16 x 8, fp32) += A (16 x 16, row) B (16 x 8, col); fragments as the PTX ISA lays them out.
template <typename Element>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8x8 16-bit matrices from shared memory; lane l gives the address of row l % 8 of matrix
// l / 8. The memory clobber keeps them after the stores that zeroed V rows (decode_consumer.cuh).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_transposed(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// Address of 16-byte chunk `chunk` (head dims 8 * chunk .. 8 * chunk + 7) of row `row` in a
// two-panel tile written by 128B-swizzled TMA boxes (or in that layout by load_queries): chunk
// c % 8 of a 128-byte panel row sits at position (c % 8) ^ (row % 8).
__device__ __forceinline__ uint32_t swizzled_chunk_offset(int row, int chunk,
                                                          uint32_t panel_bytes) {
  return (chunk / 8) * panel_bytes + row * 128 + (((chunk % 8) ^ (row % 8)) * 16);
}

__device__ __forceinline__ uint32_t swizzled_chunk(uint32_t tile, int row, int chunk,
                                                   uint32_t panel_bytes) {
  return tile + swizzled_chunk_offset(row, chunk, panel_bytes);
}

}  // namespace flashmsa::sm90
