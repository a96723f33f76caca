// Combines the fp32 partial results of a KV split (decode) into out and the LSEs:
//   lse = log sum_s exp(lse_s),  out = sum_s exp(lse_s - lse) * out_s,
//   lse_t likewise over the partial temperature LSEs.
// Splits that read nothing carry lse_s = -inf and weigh 0; a row where every split read nothing
// gets out = 0 and lse = lse_t = -inf. One warp per (token, query head), 4 dims per lane.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "sm90/launch_programmatic.h"
#include "sm90/merge.h"

namespace flashmsa::sm90 {
namespace {

constexpr int kWarpsPerBlock = 8;

template <typename Element>
__device__ __forceinline__ void store4(Element* destination, float4 value);

template <>
__device__ __forceinline__ void store4(__nv_bfloat16* destination, float4 value) {
  __nv_bfloat162 pair[2] = {__floats2bfloat162_rn(value.x, value.y),
                            __floats2bfloat162_rn(value.z, value.w)};
  *reinterpret_cast<uint2*>(destination) = *reinterpret_cast<uint2*>(pair);
}

template <>
__device__ __forceinline__ void store4(__half* destination, float4 value) {
  __half2 pair[2] = {__floats2half2_rn(value.x, value.y), __floats2half2_rn(value.z, value.w)};
  *reinterpret_cast<uint2*>(destination) = *reinterpret_cast<uint2*>(pair);
}

__device__ __forceinline__ float log_sum_exp(const float* values, int64_t stride, int count) {
  float maximum = -INFINITY;
  for (int s = 0; s < count; ++s) maximum = fmaxf(maximum, values[s * stride]);
  if (maximum == -INFINITY) return -INFINITY;
  float sum = 0.f;
  for (int s = 0; s < count; ++s) sum += __expf(values[s * stride] - maximum);
  return maximum + __logf(sum);
}

template <typename Element>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) merge_splits(const MergeParams p) {
  // Launched as a programmatic dependent of the split kernel: scheduled early, it waits here
  // until the partials are complete and visible.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= p.total_q * p.num_qo_heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t token = row / p.num_qo_heads, head = row % p.num_qo_heads;
  const int64_t split_stride = p.total_q * p.num_qo_heads;

  const float lse = log_sum_exp(p.partial_lse + row, split_stride, p.num_splits);
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  if (lse != -INFINITY) {
    for (int s = 0; s < p.num_splits; ++s) {
      const float weight = __expf(p.partial_lse[s * split_stride + row] - lse);
      const float4 part = *reinterpret_cast<const float4*>(
          p.partial_out + (s * split_stride + row) * kMergeHeadDim + 4 * lane);
      sum.x += weight * part.x;
      sum.y += weight * part.y;
      sum.z += weight * part.z;
      sum.w += weight * part.w;
    }
  }
  store4(static_cast<Element*>(p.out) + token * p.out_stride_token + head * p.out_stride_head +
             4 * lane,
         sum);
  if (lane == 0) {
    if (p.lse) p.lse[token * p.lse_stride_token + head * p.lse_stride_head] = lse;
    if (p.lse_t) {
      p.lse_t[token * p.lse_t_stride_token + head * p.lse_t_stride_head] =
          log_sum_exp(p.partial_lse_t + row, split_stride, p.num_splits);
    }
  }
}

}  // namespace

template <typename Element>
cudaError_t launch_merge(const MergeParams& params, cudaStream_t stream) {
  const int64_t rows = params.total_q * params.num_qo_heads;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks == 0) return cudaSuccess;
  return launch_programmatic(merge_splits<Element>, dim3(static_cast<unsigned>(blocks)),
                             dim3(32 * kWarpsPerBlock), 0, stream, params);
}

template cudaError_t launch_merge<__nv_bfloat16>(const MergeParams&, cudaStream_t);
template cudaError_t launch_merge<__half>(const MergeParams&, cudaStream_t);

}  // namespace flashmsa::sm90
