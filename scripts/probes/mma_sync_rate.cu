// Diagnostic, not part of the library: how fast Hopper runs attention's inner loop on mma.sync
// (the decode kernel's instructions), the rate a prefill design that computes each token on its
// own blocks with one warp per token would have. docs/performance.md's cost model assumed 60% of
// the wgmma rate.
//
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -Isrc \
//       -o build-gpu/mma_sync_rate scripts/probes/mma_sync_rate.cu
//   build-gpu/mma_sync_rate
//
// Each warp holds one token's 16 heads (its Q as bf16 A fragments) and walks blocks of 128 keys
// whose K and V sit in shared memory (128 x 128 bf16 each, 16-byte chunks XOR-swizzled by key):
// per half block of 64 keys, S = Q K^T (ldmatrix, mma.sync m16n8k16), optionally the
// exponentials a softmax takes (exp2 of every score), P to bf16 in registers, and O += P V
// (ldmatrix.trans). 4 x 16 x 128 x 128 FLOP a warp a block. No softmax bookkeeping, no loads
// from global memory: an upper bound of the loop.
//
// Result (H200, docs/gpu_runs/mma_sync_rate/): 412 / 453 / 463 TFLOP/s with 4 / 8 / 16 warps a
// CTA, 446 / 448 with the exponentials (8 / 16 warps): about 68% of cuDNN's dense attention
// (660) on wgmma. The 16-warp builds hold 128 registers a thread (the exponential one spills 4
// bytes).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_common.cuh"

constexpr int kKeys = 128, kDims = 128;
constexpr int kRowBytes = kDims * 2;  // 256 bytes: 16 chunks of 8 dims

__device__ __forceinline__ uint32_t swizzled(int key, int dim) {  // byte offset in a 32 KiB tile
  return key * kRowBytes + (((dim / 8) ^ (key % 8)) * 16) + (dim % 8) * 2;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t address, uint32_t& r0, uint32_t& r1,
                                            uint32_t& r2, uint32_t& r3, bool transpose) {
  if (transpose) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(address));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(address));
  }
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <int kWarps, bool kExp>
__global__ void __launch_bounds__(kWarps * 32, 1) attention_loop(float* out, int blocks) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* k_tile = smem;
  uint8_t* v_tile = smem + kKeys * kRowBytes;
  for (int i = threadIdx.x; i < 2 * kKeys * kRowBytes / 4; i += blockDim.x) {
    reinterpret_cast<uint32_t*>(smem)[i] = 0x3c003c00u ^ (i * 2654435761u & 0x00ff00ffu);
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const uint32_t k_base = flashmsa::sm90::smem_address(k_tile);
  const uint32_t v_base = flashmsa::sm90::smem_address(v_tile);
  uint32_t q[8][4];
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) {
#pragma unroll
    for (int r = 0; r < 4; ++r) q[ks][r] = 0x3c003c00u + (lane * 8 + ks * 4 + r) * 0x00010001u;
  }
  float o[16][4] = {};
  const int matrix = lane / 8, row = lane % 8;
#pragma unroll 1
  for (int block = 0; block < blocks; ++block) {
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      float s[8][4] = {};
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
#pragma unroll
        for (int nt = 0; nt < 8; nt += 2) {
          const int key = half * 64 + nt * 8 + (matrix / 2) * 8 + row;
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4(k_base + swizzled(key, ks * 16 + (matrix % 2) * 8), b0, b1, b2, b3, false);
          mma(s[nt], q[ks], b0, b1);
          mma(s[nt + 1], q[ks], b2, b3);
        }
      }
      if (kExp) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int r = 0; r < 4; ++r) s[nt][r] = exp2f(s[nt][r] * 0.125f - 1.0f);
        }
      }
      uint32_t p[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        p[kk][0] = pack(s[2 * kk][0], s[2 * kk][1]);
        p[kk][1] = pack(s[2 * kk][2], s[2 * kk][3]);
        p[kk][2] = pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        p[kk][3] = pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int nt = 0; nt < 16; nt += 2) {
          const int key = half * 64 + kk * 16 + (matrix % 2) * 8 + row;
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4(v_base + swizzled(key, (nt + matrix / 2) * 8), b0, b1, b2, b3, true);
          mma(o[nt], p[kk], b0, b1);
          mma(o[nt + 1], p[kk], b2, b3);
        }
      }
    }
  }
  float sum = 0;
#pragma unroll
  for (int nt = 0; nt < 16; ++nt) sum += o[nt][0] + o[nt][1] + o[nt][2] + o[nt][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

template <int kWarps, bool kExp>
static int run(int sms, float* out, cudaEvent_t start, cudaEvent_t stop) {
  auto kernel = attention_loop<kWarps, kExp>;
  const size_t shared = 2 * kKeys * kRowBytes;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
  const int blocks = 400;
  kernel<<<sms, kWarps * 32, shared>>>(out, blocks);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int rep = 0; rep < 5; ++rep) {
    CHECK(cudaEventRecord(start));
    kernel<<<sms, kWarps * 32, shared>>>(out, blocks);
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float elapsed = 0;
    CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(elapsed);
  }
  std::sort(ms.begin(), ms.end());
  const double flop = 4.0 * 16 * kKeys * kDims * blocks * kWarps * sms;
  std::printf("%6d warps a CTA (one per SM) %-16s %8.1f TFLOP/s\n", kWarps,
              kExp ? "with exp2" : "mma only", flop / (ms[2] * 1e-3) / 1e12);
  return 0;
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float* out = nullptr;
  CHECK(cudaMalloc(&out, sms * 1024 * sizeof(float)));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  if (run<4, false>(sms, out, start, stop) || run<8, false>(sms, out, start, stop) ||
      run<16, false>(sms, out, start, stop) || run<8, true>(sms, out, start, stop) ||
      run<16, true>(sms, out, start, stop)) {
    return 1;
  }
  CHECK(cudaFree(out));
  return 0;
}
