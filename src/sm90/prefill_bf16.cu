#include <cuda_bf16.h>

#include "sm90/prefill_launch_impl.cuh"

namespace flashmsa::sm90 {
template cudaError_t launch_prefill<__nv_bfloat16, KvFormat::kNative>(
    const AttentionParams&, dim3, bool, bool, cudaStream_t);

int max_active_one_consumer_clusters(uint32_t shared_bytes, int cluster_size) {
  return max_active_one_consumer_clusters_of<__nv_bfloat16>(shared_bytes, cluster_size);
}
}  // namespace flashmsa::sm90

// The bf16 prefill kernels' timeline ring (multi-token prediction's two-consumer tiles among
// them), in timeline builds (sm90/timeline.cuh, scripts/timeline.py).
FLASHMSA_EXPORT_TIMELINE_RING(prefill_bf16)
