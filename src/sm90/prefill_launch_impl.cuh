// Definition of launch_prefill: picks the kernel variant and launches it (no host sync).
#pragma once

#include "sm90/launch_programmatic.h"
#include "sm90/prefill_kernel.cuh"
#include "sm90/prefill_launch.h"

namespace flashmsa::sm90 {

template <typename Element, bool kTemperatureLse, int kConsumers>
cudaError_t launch_prefill_variant(const PrefillParams& params, dim3 grid, cudaStream_t stream) {
  auto kernel = prefill_kernel<Element, kTemperatureLse, kConsumers>;
  static thread_local int configured_device = -1;
  const cudaError_t status = configure_kernel_once(kernel, configured_device);
  if (status != cudaSuccess) return status;
  const uint32_t shared_bytes = params.smem_layout.bytes + kSharedMemoryAlignmentSlack;
  const unsigned cluster_size = params.cluster_reduce ? static_cast<unsigned>(params.num_splits) : 1u;
  return launch_programmatic(kernel, grid, dim3(RoleConfig<kConsumers>::kThreads), shared_bytes,
                             stream, cluster_size, params);
}

// The query behind max_active_decode_clusters (prefill_bf16.cu instantiates it for bf16; the
// dtype changes neither registers nor shared memory).
template <typename Element>
int max_active_decode_clusters_of(uint32_t shared_bytes, int cluster_size) {
  return max_active_clusters(prefill_kernel<Element, false, 1>, RoleConfig<1>::kThreads,
                             shared_bytes, cluster_size);
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
