// Where a call's results go: out and the optional LSEs, with their strides in elements. Held by
// both the attention kernel (AttentionParams) and the split merge (MergeParams), filled once on the
// host.
#pragma once

#include <stdint.h>

namespace flashmsa::sm90 {

struct OutputParams {
  void* out;     // (total_q, Hq, 128) in q's dtype
  int64_t out_stride_token, out_stride_head;
  float* lse;    // (total_q, Hq) or nullptr
  int64_t lse_stride_token, lse_stride_head;
  float* lse_t;  // (total_q, Hq) or nullptr
  int64_t lse_t_stride_token, lse_t_stride_head;

#if defined(__CUDACC__)
  // Element offsets of (token, query head) in each output.
  __device__ __forceinline__ int64_t out_offset(int64_t token, int64_t head) const {
    return token * out_stride_token + head * out_stride_head;
  }
  __device__ __forceinline__ int64_t lse_offset(int64_t token, int64_t head) const {
    return token * lse_stride_token + head * lse_stride_head;
  }
  __device__ __forceinline__ int64_t lse_t_offset(int64_t token, int64_t head) const {
    return token * lse_t_stride_token + head * lse_t_stride_head;
  }
#endif
};

}  // namespace flashmsa::sm90
