#include <cuda_bf16.h>

#include "sm90/prefill_launch_impl.cuh"

namespace flashmsa::sm90 {
template cudaError_t launch_prefill<__nv_bfloat16, KvFormat::kNvfp4>(
    const AttentionParams&, dim3, bool, bool, cudaStream_t);
}  // namespace flashmsa::sm90
