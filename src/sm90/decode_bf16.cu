#include <cuda_bf16.h>

#include "sm90/decode_launch_impl.cuh"

namespace flashmsa::sm90 {
template cudaError_t launch_decode<__nv_bfloat16, KvFormat::kNative>(const AttentionParams&,
                                                                    dim3, bool, cudaStream_t);

// Neither the dtype nor the K/V format changes the launch bounds or shared memory.
int max_active_decode_clusters(uint32_t shared_bytes, int cluster_size) {
  return max_active_clusters(decode_kernel<__nv_bfloat16, false>, kDecodeThreads, shared_bytes,
                             cluster_size);
}
}  // namespace flashmsa::sm90

// The bf16 one-token decode kernels' timeline ring, in timeline builds (sm90/timeline.cuh,
// scripts/timeline.py).
FLASHMSA_EXPORT_TIMELINE_RING(decode_bf16)
