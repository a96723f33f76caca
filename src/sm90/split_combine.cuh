// The partial results of a KV split: how a split CTA stores its rows (fp32, normalised, with
// their LSEs), and how they are combined: warp-wide log-sum-exp of the split LSEs and 16-bit
// stores of four combined values. Shared by the merge kernel (merge.cu: partials in
// global memory) and the cluster reduction (cluster_reduce.cuh: partials in the split CTAs'
// shared memory). lse = log sum_s exp(lse_s), out = sum_s exp(lse_s - lse) * out_s; splits that
// read nothing carry lse_s = -inf and weigh 0.
#pragma once

#include <math.h>

#include "sm90/mma.cuh"
#include "sm90/params.h"

namespace flashmsa::sm90 {

// Row (split, token, head) of the workspace partials: (num_splits, total_q, Hq) rows of
// kHeadDim fp32 values and their LSEs (launch_plan.cpp: workspace_layout; merge.cu reads them).
__device__ __forceinline__ int64_t workspace_partial_row(const AttentionParams& p, int split,
                                                         int64_t token, int64_t head) {
  return (split * p.total_q + token) * p.num_qo_heads + head;
}

// Accumulator row h of a consumer thread (its 32 of the row's 128 columns), times `scale`, into
// the fp32 row at `row`, and the row's LSEs by the first lane of the row's quad. The same for
// the workspace (merge.cu) and for the cluster's shared memory (cluster_reduce.cuh).
template <bool kTemperatureLse>
__device__ __forceinline__ void store_partial_row(float* row, float* lse_slot, float* lse_t_slot,
                                                  const Accumulator& o, int h, float scale,
                                                  float lse, float lse_t) {
  const int lane = threadIdx.x % 32;
  float* out = row + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    *reinterpret_cast<float2*>(out + 8 * j) =
        make_float2(o[4 * j + 2 * h] * scale, o[4 * j + 2 * h + 1] * scale);
  }
  if (lane % 4 == 0) {
    *lse_slot = lse;
    if (kTemperatureLse) *lse_t_slot = lse_t;
  }
}

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
