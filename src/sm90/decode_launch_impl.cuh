// Definition of launch_one_token_decode: picks the variant and launches it (no host sync).
#pragma once

#include "sm90/decode_kernel.cuh"
#include "sm90/decode_launch.h"
#include "sm90/launch_programmatic.h"

namespace flashmsa::sm90 {

template <typename Element, bool kTemperatureLse>
cudaError_t launch_one_token_decode_variant(const PrefillParams& params, dim3 grid,
                                            cudaStream_t stream) {
  auto kernel = decode_kernel<Element, kTemperatureLse>;
  static thread_local int configured_device = -1;
  const cudaError_t status = configure_kernel_once(kernel, configured_device);
  if (status != cudaSuccess) return status;
  const uint32_t shared_bytes = params.smem_layout.bytes + kSharedMemoryAlignmentSlack;
  const unsigned cluster_size = params.cluster_reduce ? static_cast<unsigned>(params.num_splits) : 1u;
  return launch_programmatic(kernel, grid, dim3(kDecodeThreads), shared_bytes, stream,
                             cluster_size, params);
}

template <typename Element>
cudaError_t launch_one_token_decode(const PrefillParams& params, dim3 grid, bool temperature_lse,
                                    cudaStream_t stream) {
  return temperature_lse ? launch_one_token_decode_variant<Element, true>(params, grid, stream)
                         : launch_one_token_decode_variant<Element, false>(params, grid, stream);
}

}  // namespace flashmsa::sm90
