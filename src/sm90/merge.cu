// Combines the fp32 partial results of a KV split (decode) into out and the LSEs:
//   lse = log sum_s exp(lse_s),  out = sum_s exp(lse_s - lse) * out_s,
//   lse_t likewise over the partial temperature LSEs.
// Splits that read nothing carry lse_s = -inf and weigh 0; a row where every split read nothing
// gets out = 0 and lse = lse_t = -inf. One warp per (token, query head), 4 dims per lane.
// Decode launches reduce inside a thread-block cluster instead (cluster_reduce.cuh); this kernel
// serves the other split launches.
#include "sm90/launch_programmatic.h"
#include "sm90/merge.h"
#include "sm90/ptx.cuh"
#include "sm90/split_combine.cuh"

namespace flashmsa::sm90 {
namespace {

constexpr int kWarpsPerBlock = 8;

template <typename Element>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) merge_splits(const MergeParams p) {
  // Launched as a programmatic dependent of the split kernel: scheduled early, it waits here
  // until the partials are complete and visible.
  wait_for_previous_grid();
  allow_next_grid_launch();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= p.total_q * p.num_qo_heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t token = row / p.num_qo_heads, head = row % p.num_qo_heads;
  const int64_t split_stride = p.total_q * p.num_qo_heads;

  // Every split's LSE is loaded at once (one per lane), not one dependent load per split.
  float lse_part[2], lse_t_part[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int split = lane + 32 * h;
    const bool exists = split < p.num_splits;
    lse_part[h] = exists ? p.partial_lse[split * split_stride + row] : -INFINITY;
    lse_t_part[h] =
        exists && p.output.lse_t ? p.partial_lse_t[split * split_stride + row] : -INFINITY;
  }
  const float lse = warp_log_sum_exp(lse_part);
  float weight[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) weight[h] = lse == -INFINITY ? 0.f : __expf(lse_part[h] - lse);

  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  if (lse != -INFINITY) {
    const float* part = p.partial_out + row * kMergeHeadDim + 4 * lane;
#pragma unroll 4
    for (int s = 0; s < p.num_splits; ++s) {
      const float w = __shfl_sync(0xffffffffu, s < 32 ? weight[0] : weight[1], s % 32);
      const float4 value =
          *reinterpret_cast<const float4*>(part + s * split_stride * kMergeHeadDim);
      sum.x += w * value.x;
      sum.y += w * value.y;
      sum.z += w * value.z;
      sum.w += w * value.w;
    }
  }
  store4(static_cast<Element*>(p.output.out) + p.output.out_offset(token, head) + 4 * lane, sum);
  const float lse_t = p.output.lse_t ? warp_log_sum_exp(lse_t_part) : 0.f;
  if (lane == 0) {
    if (p.output.lse) p.output.lse[p.output.lse_offset(token, head)] = lse;
    if (p.output.lse_t) p.output.lse_t[p.output.lse_t_offset(token, head)] = lse_t;
  }
}

}  // namespace

template <typename Element>
cudaError_t launch_merge(const MergeParams& params, cudaStream_t stream) {
  const int64_t rows = params.total_q * params.num_qo_heads;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks == 0) return cudaSuccess;
  return launch_programmatic(merge_splits<Element>, dim3(static_cast<unsigned>(blocks)),
                             dim3(32 * kWarpsPerBlock), 0, stream, 1u, params);
}

template cudaError_t launch_merge<__nv_bfloat16>(const MergeParams&, cudaStream_t);
template cudaError_t launch_merge<__half>(const MergeParams&, cudaStream_t);

}  // namespace flashmsa::sm90
