#include <cuda_bf16.h>

#include "sm90/decode_launch_impl.cuh"

namespace flashmsa::sm90 {
template cudaError_t launch_one_token_decode<__nv_bfloat16>(const PrefillParams&, dim3, bool,
                                                            cudaStream_t);

// The dtype changes neither registers nor shared memory.
int max_active_one_token_clusters(uint32_t shared_bytes, int cluster_size) {
  return max_active_clusters(decode_kernel<__nv_bfloat16, false>, kDecodeThreads, shared_bytes,
                             cluster_size);
}
}  // namespace flashmsa::sm90

#ifdef FLASHMSA_TIMELINE
// The bf16 one-token decode kernels' timeline ring (sm90/timeline.cuh, scripts/timeline.py):
// a cudaError_t, 0 on success. Only in timeline builds.
extern "C" __attribute__((visibility("default"))) int flashmsa_timeline_ring_decode_bf16(
    void* ring, void* calls, int reset) {
  return static_cast<int>(flashmsa::sm90::timeline_ring_control(ring, calls, reset));
}
#endif
