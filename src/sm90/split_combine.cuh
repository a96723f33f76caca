// Combining the partial results of a KV split: warp-wide log-sum-exp of the split LSEs and
// 16-bit stores of four combined values. Shared by the merge kernel (merge.cu: partials in
// global memory) and the cluster reduction (cluster_reduce.cuh: partials in the split CTAs'
// shared memory). lse = log sum_s exp(lse_s), out = sum_s exp(lse_s - lse) * out_s; splits that
// read nothing carry lse_s = -inf and weigh 0.
#pragma once

#include <math.h>

#include "sm90/mma.cuh"

namespace flashmsa::sm90 {

// Four combined values to out in q's dtype (one 8-byte store), packed as the P V operand is.
template <typename Element>
__device__ __forceinline__ void store4(Element* destination, float4 value) {
  *reinterpret_cast<uint2*>(destination) = make_uint2(MmaAtoms<Element>::pack(value.x, value.y),
                                                      MmaAtoms<Element>::pack(value.z, value.w));
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Lane l holds the LSEs of splits l and l + 32 (-inf past the split count); returns log sum exp
// over all of them, in every lane.
__device__ __forceinline__ float warp_log_sum_exp(const float (&lse)[2]) {
  const float maximum = warp_max(fmaxf(lse[0], lse[1]));
  if (maximum == -INFINITY) return -INFINITY;
  return maximum + __logf(warp_sum(__expf(lse[0] - maximum) + __expf(lse[1] - maximum)));
}

}  // namespace flashmsa::sm90
