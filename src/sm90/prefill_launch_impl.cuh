// Definition of launch_prefill: picks the kernel variant and launches it (no host sync).
#pragma once

#include "sm90/launch_programmatic.h"
#include "sm90/prefill_kernel.cuh"
#include "sm90/prefill_launch.h"

namespace flashmsa::sm90 {

template <typename Element, bool kTemperatureLse, int kConsumers>
cudaError_t launch_prefill_variant(const PrefillParams& params, dim3 grid, cudaStream_t stream) {
  auto kernel = prefill_kernel<Element, kTemperatureLse, kConsumers>;
  // Opting in to more than 48 KiB of shared memory is needed once per device and kernel.
  static thread_local int configured_device = -1;
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  if (configured_device != device) {
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kSharedMemoryLimit);
    if (status != cudaSuccess) return status;
    configured_device = device;
  }
  const uint32_t shared_bytes = params.smem_layout.bytes + kSharedMemoryAlignmentSlack;
  const unsigned cluster_size = params.cluster_reduce ? static_cast<unsigned>(params.num_splits) : 1u;
  return launch_programmatic(kernel, grid, dim3(RoleConfig<kConsumers>::kThreads), shared_bytes,
                             stream, cluster_size, params);
}

template <typename Element>
cudaError_t launch_prefill(const PrefillParams& params, dim3 grid, bool temperature_lse,
                           cudaStream_t stream) {
  if (params.num_consumer_warpgroups == 1) {
    return temperature_lse ? launch_prefill_variant<Element, true, 1>(params, grid, stream)
                           : launch_prefill_variant<Element, false, 1>(params, grid, stream);
  }
  return temperature_lse ? launch_prefill_variant<Element, true, 2>(params, grid, stream)
                         : launch_prefill_variant<Element, false, 2>(params, grid, stream);
}

}  // namespace flashmsa::sm90
