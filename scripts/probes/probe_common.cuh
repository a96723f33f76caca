// What the diagnostic probes in scripts/probes/ (sm_bandwidth.cu, gather_ceiling.cu,
// l2_bandwidth.cu, mma_sync_rate.cu)
// share; not part of the library. Built with -Isrc.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "sm90/ptx.cuh"

// A CUDA call in main(): on an error, print it and return 1.
#define CHECK(call)                                                                        \
  do {                                                                                     \
    cudaError_t status_ = (call);                                                          \
    if (status_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
                   cudaGetErrorString(status_));                                           \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

// One 1-D bulk copy (cp.async.bulk, what the kernel's TMA does for a contiguous piece) of
// `bytes` from global memory into shared memory, completing on `barrier`.
__device__ __forceinline__ void bulk_load(void* destination, const void* source, uint32_t bytes,
                                          uint64_t* barrier) {
  using flashmsa::sm90::smem_address;
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
      ::"r"(smem_address(destination)), "l"(source), "r"(bytes), "r"(smem_address(barrier))
      : "memory");
}
