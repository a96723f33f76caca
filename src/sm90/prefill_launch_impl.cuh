// Definition of launch_prefill: picks the kernel variant and launches it (no host sync).
#pragma once

#include "sm90/launch_programmatic.h"
#include "sm90/prefill_kernel.cuh"
#include "sm90/prefill_launch.h"

namespace flashmsa::sm90 {

// Once per device and kernel: more than 48 KiB of shared memory, and clusters past the portable
// size of 8 (decode's KV splits, kMaxClusterSplits).
template <typename Kernel>
cudaError_t configure_kernel(Kernel kernel) {
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            kSharedMemoryLimit);
  if (status != cudaSuccess) return status;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
}

template <typename Element, bool kTemperatureLse, int kConsumers>
cudaError_t launch_prefill_variant(const PrefillParams& params, dim3 grid, cudaStream_t stream) {
  auto kernel = prefill_kernel<Element, kTemperatureLse, kConsumers>;
  static thread_local int configured_device = -1;
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  if (configured_device != device) {
    status = configure_kernel(kernel);
    if (status != cudaSuccess) return status;
    configured_device = device;
  }
  const uint32_t shared_bytes = params.smem_layout.bytes + kSharedMemoryAlignmentSlack;
  const unsigned cluster_size = params.cluster_reduce ? static_cast<unsigned>(params.num_splits) : 1u;
  return launch_programmatic(kernel, grid, dim3(RoleConfig<kConsumers>::kThreads), shared_bytes,
                             stream, cluster_size, params);
}

// The query behind max_active_decode_clusters (prefill_bf16.cu instantiates it for bf16; the
// dtype changes neither registers nor shared memory).
template <typename Element>
int max_active_decode_clusters_of(uint32_t shared_bytes, int cluster_size) {
  auto kernel = prefill_kernel<Element, false, 1>;
  if (configure_kernel(kernel) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(cluster_size);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(cluster_size));
  config.blockDim = dim3(RoleConfig<1>::kThreads);
  config.dynamicSmemBytes = shared_bytes;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    cudaGetLastError();  // the query's failure is not the caller's sticky error
    return 0;
  }
  return clusters;
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
