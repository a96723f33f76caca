// Declaration of the prefill kernel launch, one explicit instantiation per q dtype and K/V
// format (prefill_bf16.cu, prefill_fp16.cu, prefill_{bf16,fp16}_fp8.cu and _fp8_scaled.cu) so
// that the heavy kernel compiles once per pair, each in its own translation unit.
#pragma once

#include <cuda_runtime.h>

#include "sm90/params.h"

namespace flashmsa::sm90 {

// token_warps: the plan's LaunchPlan::token_warps (the two-consumer kernel with the token-warp
// consumer; fp8 K/V only).
template <typename Element, KvFormat kKv>
cudaError_t launch_prefill(const AttentionParams& params, dim3 grid, bool temperature_lse,
                           bool token_warps, cudaStream_t stream);

// How many thread-block clusters of `cluster_size` decode-kernel CTAs (one consumer warpgroup,
// `shared_bytes` of dynamic shared memory each) the current device holds at once
// (cudaOccupancyMaxActiveClusters); 0 if the query fails. Clusters are placed within one GPC, so
// this can be well below the CTA slots divided by the cluster size.
int max_active_one_consumer_clusters(uint32_t shared_bytes, int cluster_size);

}  // namespace flashmsa::sm90
