// Definition of launch_decode: picks the variant and launches it (no host sync).
#pragma once

#include "sm90/decode_kernel.cuh"
#include "sm90/decode_launch.h"
#include "sm90/launch_programmatic.h"

namespace flashmsa::sm90 {

template <typename Element, KvFormat kKv, bool kTemperatureLse>
cudaError_t launch_decode_variant(const AttentionParams& params, dim3 grid,
                                  cudaStream_t stream) {
  static thread_local int configured_device = -1;
  return launch_attention_kernel(decode_kernel<Element, kTemperatureLse, kKv>, configured_device,
                                 params, grid, kDecodeThreads, stream);
}

template <typename Element, KvFormat kKv>
cudaError_t launch_decode(const AttentionParams& params, dim3 grid, bool temperature_lse,
                          cudaStream_t stream) {
  return temperature_lse ? launch_decode_variant<Element, kKv, true>(params, grid, stream)
                         : launch_decode_variant<Element, kKv, false>(params, grid, stream);
}

}  // namespace flashmsa::sm90
