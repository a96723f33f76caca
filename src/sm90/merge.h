// The reduction of KV-split partials (see merge.cu).
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "sm90/kernel_traits.h"
#include "sm90/output_params.h"

namespace flashmsa::sm90 {

constexpr int kMergeHeadDim = 128;

struct MergeParams {
  const float* partial_out;    // (num_splits, total_q, Hq, 128)
  const float* partial_lse;    // (num_splits, total_q, Hq)
  const float* partial_lse_t;  // (num_splits, total_q, Hq), read only when lse_t is wanted
  OutputParams output;
  int64_t total_q;
  int32_t num_qo_heads;
  int32_t num_splits;
};

template <typename Element>
cudaError_t launch_merge(const MergeParams& params, cudaStream_t stream);

}  // namespace flashmsa::sm90
