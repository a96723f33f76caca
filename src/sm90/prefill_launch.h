// Declaration of the prefill kernel launch, one explicit instantiation per q/K/V dtype
// (prefill_bf16.cu, prefill_fp16.cu) so that the heavy kernel compiles once per dtype.
#pragma once

#include <cuda_runtime.h>

#include "sm90/params.h"

namespace flashmsa::sm90 {

template <typename Element>
cudaError_t launch_prefill(const PrefillParams& params, dim3 grid, bool temperature_lse,
                           cudaStream_t stream);

}  // namespace flashmsa::sm90
