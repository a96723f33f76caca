#include <cuda_bf16.h>

#include "sm90/prefill_launch_impl.cuh"

namespace flashmsa::sm90 {
template cudaError_t launch_prefill<__nv_bfloat16>(const PrefillParams&, dim3, bool,
                                                   cudaStream_t);

int max_active_decode_clusters(uint32_t shared_bytes, int cluster_size) {
  return max_active_decode_clusters_of<__nv_bfloat16>(shared_bytes, cluster_size);
}
}  // namespace flashmsa::sm90

#ifdef FLASHMSA_TIMELINE
// The bf16 prefill kernels' timeline ring (the two-consumer decode tiles of multi-token
// prediction among them; sm90/timeline.cuh, scripts/timeline.py): a cudaError_t, 0 on success.
// Only in timeline builds.
extern "C" __attribute__((visibility("default"))) int flashmsa_timeline_ring_prefill_bf16(
    void* ring, void* calls, int reset) {
  return static_cast<int>(flashmsa::sm90::timeline_ring_control(ring, calls, reset));
}
#endif
