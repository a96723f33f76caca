#include <cuda_fp16.h>

#include "sm90/decode_launch_impl.cuh"

namespace flashmsa::sm90 {
template cudaError_t launch_decode<__half, KvFormat::kNvfp4>(const AttentionParams&, dim3, bool,
                                                           cudaStream_t);
}  // namespace flashmsa::sm90
