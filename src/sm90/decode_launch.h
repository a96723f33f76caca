// Declaration of the one-token decode kernel's launch (decode_kernel.cuh), one explicit
// instantiation per q dtype and K/V format (decode_bf16.cu, decode_fp16.cu,
// decode_{bf16,fp16}_fp8.cu and _fp8_scaled.cu).
#pragma once

#include <cuda_runtime.h>

#include "sm90/params.h"

namespace flashmsa::sm90 {

template <typename Element, KvFormat kKv>
cudaError_t launch_decode(const AttentionParams& params, dim3 grid, bool temperature_lse,
                          cudaStream_t stream);

// max_active_one_consumer_clusters for the one-token decode kernel.
int max_active_decode_clusters(uint32_t shared_bytes, int cluster_size);

}  // namespace flashmsa::sm90
