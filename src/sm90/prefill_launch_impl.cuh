// Definition of launch_prefill: picks the kernel variant and launches it (no host sync).
#pragma once

#include "sm90/launch_programmatic.h"
#include "sm90/prefill_kernel.cuh"
#include "sm90/prefill_launch.h"

namespace flashmsa::sm90 {

template <typename Element, KvFormat kKv, bool kTemperatureLse, int kConsumers,
          bool kTokenWarps = false>
cudaError_t launch_prefill_variant(const AttentionParams& params, dim3 grid, cudaStream_t stream) {
  static thread_local int configured_device = -1;
  return launch_attention_kernel(
      prefill_kernel<Element, kTemperatureLse, kConsumers, kKv, kTokenWarps>, configured_device,
      params, grid, RoleConfig<kConsumers>::kThreads, stream);
}

// The query behind max_active_one_consumer_clusters (prefill_bf16.cu instantiates it for bf16
// K/V; neither the dtype nor the K/V format changes the launch bounds or shared memory).
template <typename Element>
int max_active_one_consumer_clusters_of(uint32_t shared_bytes, int cluster_size) {
  return max_active_clusters(prefill_kernel<Element, false, 1>, RoleConfig<1>::kThreads,
                             shared_bytes, cluster_size);
}

template <typename Element, KvFormat kKv>
cudaError_t launch_prefill(const AttentionParams& params, dim3 grid, bool temperature_lse,
                           bool token_warps, cudaStream_t stream) {
  if constexpr (is_converted(kKv)) {
    if (token_warps) {
      return temperature_lse
                 ? launch_prefill_variant<Element, kKv, true, 2, true>(params, grid, stream)
                 : launch_prefill_variant<Element, kKv, false, 2, true>(params, grid, stream);
    }
  }
  if (params.num_consumer_warpgroups == 1) {
    if constexpr (is_nvfp4(kKv)) {
      return cudaErrorNotSupported;  // the launch plan gives NVFP4 the two-consumer kernel
    } else {
      return temperature_lse
                 ? launch_prefill_variant<Element, kKv, true, 1>(params, grid, stream)
                 : launch_prefill_variant<Element, kKv, false, 1>(params, grid, stream);
    }
  }
  return temperature_lse ? launch_prefill_variant<Element, kKv, true, 2>(params, grid, stream)
                         : launch_prefill_variant<Element, kKv, false, 2>(params, grid, stream);
}

}  // namespace flashmsa::sm90
