// Host side of the Hopper backend: checks what only this backend requires (the device, dtypes,
// alignment for TMA and vector loads), plans the launch (launch_plan.h: from shapes and the
// device alone, no host synchronisation, so calls can be captured in CUDA graphs), encodes the
// K/V tensor maps, fills the kernel's parameter block and launches.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "api/backends.h"
#include "common/error.h"
#include "common/visibility.h"
#include "sm90/decode_launch.h"
#include "sm90/kernel_traits.h"
#include "sm90/launch_plan.h"
#include "sm90/merge.h"
#include "sm90/params.h"
#include "sm90/prefill_launch.h"

namespace flashmsa {
namespace {

void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) {
    throw Error(FLASHMSA_ERROR_CUDA, what + ": " + cudaGetErrorString(status));
  }
}

// Runs the call on args.device_index and restores the caller's current device afterwards.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
};

void require_hopper(int device) {
  int major = 0, minor = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
             "cudaDeviceGetAttribute");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
             "cudaDeviceGetAttribute");
  if (major != 9 || minor != 0) {
    fail_not_supported("the CUDA kernels need compute capability 9.0 (Hopper: H100/H800/H20/H200); "
                       "this device is " + std::to_string(major) + "." + std::to_string(minor));
  }
}

// TMA needs 16-byte aligned bases and strides; the vectorised q loads and out stores need the
// same of q and out.
void require_aligned(const char* name, const void* pointer, std::initializer_list<int64_t> strides,
                     int element_bytes, int alignment) {
  bool aligned = reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
  for (int64_t stride : strides) aligned = aligned && (stride * element_bytes) % alignment == 0;
  if (!aligned) {
    fail_not_supported(std::string(name) + ": the CUDA kernels need a " +
                       std::to_string(alignment) +
                       "-byte aligned data pointer and strides that are multiples of " +
                       std::to_string(alignment) + " bytes");
  }
}

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    cudaError_t status = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function,
                                                          12000, cudaEnableDefault, &found);
    return (status == cudaSuccess && found == cudaDriverEntryPointSuccess)
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function)
               : nullptr;
  }();
  if (encoder == nullptr) {
    throw Error(FLASHMSA_ERROR_CUDA, "the CUDA driver has no cuTensorMapEncodeTiled");
  }
  return encoder;
}

// K or V as a TMA tensor with boxes of 128 tokens, 128 bytes wide with the 128-byte swizzle (64
// dims of q's dtype, or all 128 fp8 dims) or, for NVFP4, 64 bytes wide (a whole packed row)
// without swizzle, and the L2 promotion the plan chose. Out-of-range boxes (a flat request's
// last block past total_k) are zero-filled by the hardware.
CUtensorMap make_kv_tensor_map(const char* name, const void* base, const flashmsa_args& args,
                               int64_t stride_page, int64_t stride_head, int64_t stride_token,
                               CUtensorMapL2promotion promotion) {
  CUtensorMap map;
  std::memset(&map, 0, sizeof(map));
  const int64_t extent = args.is_paged ? args.num_pages : args.total_k;
  if (extent == 0) return map;  // no block can be selected: the map is never used
  const bool nvfp4 = args.kv_dtype == FLASHMSA_DTYPE_NVFP4;
  const bool fp8 = args.kv_dtype == FLASHMSA_DTYPE_FP8_E4M3;
  const bool bytes_elements = fp8 || nvfp4;
  const int64_t bytes = bytes_elements ? 1 : 2;
  const int64_t row_elements = nvfp4 ? args.head_dim / 2 : args.head_dim;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(row_elements),
                              static_cast<cuuint64_t>(args.is_paged ? 128 : args.total_k),
                              static_cast<cuuint64_t>(args.num_kv_heads),
                              static_cast<cuuint64_t>(args.num_pages)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(stride_token * bytes),
                                 static_cast<cuuint64_t>(stride_head * bytes),
                                 static_cast<cuuint64_t>(stride_page * bytes)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(nvfp4 ? sm90::kNvfp4RowBytes
                                                   : fp8 ? sm90::kHeadDim
                                                         : sm90::kPanelElems),
                             sm90::kBlockKeys, 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type = bytes_elements ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : args.q_dtype == FLASHMSA_DTYPE_BF16
                                       ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUresult status = tensor_map_encoder()(
      &map, type, args.is_paged ? 4 : 3, const_cast<void*>(base), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      nvfp4 ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B,
      promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) {
    throw Error(FLASHMSA_ERROR_CUDA, std::string("cuTensorMapEncodeTiled failed for ") + name +
                                         " (error " + std::to_string(status) + ")");
  }
  return map;
}

// Cached per device: the attribute query costs more than planning.
int multiprocessor_count(int device) {
  static std::mutex mutex;
  static std::map<int, int> counts;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = counts.find(device);
  if (found != counts.end()) return found->second;
  int count = 0;
  check_cuda(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device),
             "cudaDeviceGetAttribute");
  counts.emplace(device, count);
  return count;
}

// Clusters of the decode kernel or the one-consumer prefill kernel the device holds at once,
// cached per (device, kernel, shared memory, cluster size): the occupancy query costs more than
// a launch.
int max_active_clusters_cached(int device, bool decode_kernel, uint32_t shared_bytes,
                               int cluster_size) {
  static std::mutex mutex;
  static std::map<std::tuple<int, bool, uint32_t, int>, int> cache;
  const auto key = std::make_tuple(device, decode_kernel, shared_bytes, cluster_size);
  std::lock_guard<std::mutex> lock(mutex);
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  const int clusters =
      decode_kernel ? sm90::max_active_decode_clusters(shared_bytes, cluster_size)
                    : sm90::max_active_one_consumer_clusters(shared_bytes, cluster_size);
  cache.emplace(key, clusters);
  return clusters;
}

sm90::DeviceProperties device_properties(int device) {
  sm90::DeviceProperties properties;
  properties.multiprocessors = multiprocessor_count(device);
  properties.max_active_clusters = [device](bool decode_kernel, uint32_t shared_bytes,
                                            int cluster_size) {
    return max_active_clusters_cached(device, decode_kernel, shared_bytes, cluster_size);
  };
  return properties;
}

CUtensorMapL2promotion tensor_map_promotion(sm90::L2Promotion promotion) {
  switch (promotion) {
    case sm90::L2Promotion::k128B: return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    case sm90::L2Promotion::k256B: return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    default: return CU_TENSOR_MAP_L2_PROMOTION_NONE;
  }
}

sm90::AttentionParams make_attention_params(const flashmsa_args& args,
                                            const sm90::LaunchPlan& plan) {
  sm90::AttentionParams p;
  std::memset(&p, 0, sizeof(p));
  const CUtensorMapL2promotion promotion = tensor_map_promotion(plan.kv_l2_promotion);
  p.tma_k = make_kv_tensor_map("k", args.k, args, args.k_stride_page, args.k_stride_head,
                               args.k_stride_token, promotion);
  p.tma_v = make_kv_tensor_map("v", args.v, args, args.v_stride_page, args.v_stride_head,
                               args.v_stride_token, promotion);
  p.q = args.q;
  p.q_stride_token = args.q_stride_token;
  p.q_stride_head = args.q_stride_head;
  p.output = sm90::OutputParams{args.out,   args.out_stride_token,   args.out_stride_head,
                                args.lse,   args.lse_stride_token,   args.lse_stride_head,
                                args.lse_t, args.lse_t_stride_token, args.lse_t_stride_head};
  p.q2k_indices = args.q2k_indices;
  p.idx_stride_head = args.idx_stride_head;
  p.idx_stride_token = args.idx_stride_token;
  p.idx_stride_topk = args.idx_stride_topk;
  p.cu_seqlens_q = args.cu_seqlens_q;
  p.cu_seqlens_k = args.cu_seqlens_k;
  p.seqused_k = args.seqused_k;
  p.page_table = args.page_table;
  p.page_table_stride_batch = args.page_table_stride_batch;
  p.page_table_stride_page = args.page_table_stride_page;
  p.q_offset_per_request = args.q_offset_per_request;
  p.batch_size = args.batch_size;
  p.total_q = args.total_q;
  p.total_k = args.is_paged ? 0 : args.total_k;
  p.num_pages = args.is_paged ? args.num_pages : 0;
  p.max_pages = args.is_paged ? std::min(args.max_pages_per_request, kMaxTablePages) : 0;
  p.num_qo_heads = static_cast<int32_t>(args.num_qo_heads);
  p.num_kv_heads = static_cast<int32_t>(args.num_kv_heads);
  p.group_size = static_cast<int32_t>(args.num_qo_heads / args.num_kv_heads);
  p.topk = static_cast<int32_t>(args.topk);
  p.topk_divisor = fast_divisor(static_cast<uint32_t>(args.topk));
  p.is_paged = args.is_paged;
  p.causal = args.causal;
  p.q_offset_mode = args.q_offset_mode;
  p.causal_entry_limit = args.causal_entry_limit;
  p.q_offset_value = args.q_offset_value;

  p.heads_per_chunk = plan.heads_per_chunk;
  p.heads_per_chunk_divisor = fast_divisor(static_cast<uint32_t>(plan.heads_per_chunk));
  p.num_head_chunks = plan.num_head_chunks;
  p.tokens_per_warpgroup = plan.tokens_per_warpgroup;
  p.tokens_per_tile = plan.tokens_per_tile;
  p.num_splits = plan.num_splits;
  p.splits_divisor = fast_divisor(static_cast<uint32_t>(plan.num_splits));
  p.cluster_reduce = plan.cluster_reduce;
  p.push_reduce = plan.push_reduce;
  p.num_consumer_warpgroups = plan.num_consumer_warpgroups;
  p.uniform_rows = plan.uniform_rows;
  p.warp_planning = plan.warp_planning;
  p.speculate_first_block = plan.speculate_first_block;
  p.tiles_outer = plan.tiles_outer;
  p.max_tiles = plan.max_tiles;
  p.tiles_divisor = fast_divisor(static_cast<uint32_t>(plan.max_tiles));
  p.columns_divisor =
      fast_divisor(static_cast<uint32_t>(args.num_kv_heads * plan.num_head_chunks));
  p.head_chunks_divisor = fast_divisor(static_cast<uint32_t>(plan.num_head_chunks));
  p.kv_cache_hint = plan.kv_evict_first ? sm90::kCacheHintEvictFirst : sm90::kCacheHintEvictNormal;
  p.smem_layout = plan.smem;
  p.inflight_throttle = plan.inflight_throttle;
  p.pacing_slack = plan.pacing_slack;

  constexpr double kLog2e = 1.4426950408889634;
  p.scale_log2 = static_cast<float>(static_cast<double>(args.softmax_scale) *
                                    args.k_global_scale * kLog2e);
  p.v_global_scale = args.v_global_scale;
  p.k_global_scale_device = args.k_global_scale_device;
  p.v_global_scale_device = args.v_global_scale_device;
  p.k_token_scale = args.k_token_scale;
  p.k_token_scale_stride_head = args.k_token_scale_stride_head;
  p.k_token_scale_slots = args.k_token_scale_slots;
  p.v_token_scale = args.v_token_scale;
  p.v_token_scale_stride_head = args.v_token_scale_stride_head;
  p.v_token_scale_slots = args.v_token_scale_slots;
  if (args.kv_dtype == FLASHMSA_DTYPE_NVFP4) {
    p.k_block_scale = args.k_scale;
    p.v_block_scale = args.v_scale;
    p.nvfp4_page_local = args.nvfp4_scale_layout == FLASHMSA_NVFP4_SCALES_PAGE_LOCAL;
    p.k_block_scale_stride_page = args.k_scale_stride_page;
    p.k_block_scale_stride_head = args.k_scale_stride_head;
    p.v_block_scale_stride_page = args.v_scale_stride_page;
    p.v_block_scale_stride_head = args.v_scale_stride_head;
  }
  p.lse_temperature = args.lse_temperature_scale;
  if (plan.merges_in_workspace()) {
    uint8_t* workspace = static_cast<uint8_t*>(args.workspace);
    p.partial_out = reinterpret_cast<float*>(workspace + plan.workspace.partial_out);
    p.partial_lse = reinterpret_cast<float*>(workspace + plan.workspace.partial_lse);
    p.partial_lse_t = reinterpret_cast<float*>(workspace + plan.workspace.partial_lse_t);
  }
  return p;
}

// launch(Element{}, KvFormat constant): the kernel instantiation of the call's q dtype and
// K/V format (fp8 with per-token scales is a format of its own).
template <typename Launch>
cudaError_t with_kernel_types(const flashmsa_args& args, Launch launch) {
  using sm90::KvFormat;
  using Fp8 = std::integral_constant<KvFormat, KvFormat::kFp8>;
  using Fp8TokenScaled = std::integral_constant<KvFormat, KvFormat::kFp8TokenScaled>;
  using Native = std::integral_constant<KvFormat, KvFormat::kNative>;
  using Nvfp4 = std::integral_constant<KvFormat, KvFormat::kNvfp4>;
  const bool fp8 = args.kv_dtype == FLASHMSA_DTYPE_FP8_E4M3;
  const bool nvfp4 = args.kv_dtype == FLASHMSA_DTYPE_NVFP4;
  const bool token_scaled = fp8 && (args.k_token_scale != nullptr ||
                                    args.v_token_scale != nullptr);
  auto with_format = [&](auto element) {
    if (nvfp4) return launch(element, Nvfp4{});
    if (token_scaled) return launch(element, Fp8TokenScaled{});
    return fp8 ? launch(element, Fp8{}) : launch(element, Native{});
  };
  if (args.q_dtype == FLASHMSA_DTYPE_BF16) return with_format(__nv_bfloat16{});
  return with_format(__half{});
}

}  // namespace

bool sm90_compiled() { return true; }

sm90::LaunchPlan plan_sm90(const flashmsa_args& args, const flashmsa_tuning& tuning) {
  DeviceScope device_scope(args.device_index);
  require_hopper(args.device_index);
  require_aligned("q", args.q, {args.q_stride_token, args.q_stride_head}, 2, 16);
  require_aligned("out", args.out, {args.out_stride_token, args.out_stride_head}, 2, 16);
  const int kv_bytes = args.kv_dtype == args.q_dtype ? 2 : 1;  // fp8 and NVFP4: byte elements
  const int64_t kv_page_stride_k = args.is_paged ? args.k_stride_page : 0;
  const int64_t kv_page_stride_v = args.is_paged ? args.v_stride_page : 0;
  require_aligned("k", args.k, {kv_page_stride_k, args.k_stride_head, args.k_stride_token},
                  kv_bytes, 16);
  require_aligned("v", args.v, {kv_page_stride_v, args.v_stride_head, args.v_stride_token},
                  kv_bytes, 16);
  if (args.kv_dtype == FLASHMSA_DTYPE_NVFP4) {  // scale bytes move four at a time
    require_aligned("k_scale", args.k_scale, {}, 1, 4);
    require_aligned("v_scale", args.v_scale, {}, 1, 4);
  }
  return sm90::plan_launch(args, device_properties(args.device_index), tuning);
}

void run_sm90(const flashmsa_args& args, const sm90::LaunchPlan& plan) {
  if (plan.empty) return;
  DeviceScope device_scope(args.device_index);
  const sm90::AttentionParams params = make_attention_params(args, plan);
  const dim3 grid(static_cast<unsigned>(plan.grid_ctas));
  const bool temperature_lse = args.lse_t != nullptr;
  cudaStream_t stream = static_cast<cudaStream_t>(args.stream);
  const bool bf16 = args.q_dtype == FLASHMSA_DTYPE_BF16;
  cudaError_t status = with_kernel_types(args, [&](auto element, auto format) {
    using Element = decltype(element);
    constexpr sm90::KvFormat kKv = decltype(format)::value;
    return plan.decode_kernel
               ? sm90::launch_decode<Element, kKv>(params, grid, temperature_lse, stream)
               : sm90::launch_prefill<Element, kKv>(params, grid, temperature_lse,
                                                    plan.token_warps, stream);
  });
  check_cuda(status, plan.decode_kernel ? "launching the sm90 decode kernel"
                                        : "launching the sm90 prefill kernel");
  if (!plan.merges_in_workspace()) return;

  sm90::MergeParams merge;
  merge.partial_out = params.partial_out;
  merge.partial_lse = params.partial_lse;
  merge.partial_lse_t = params.partial_lse_t;
  merge.output = params.output;
  merge.total_q = args.total_q;
  merge.num_qo_heads = static_cast<int32_t>(args.num_qo_heads);
  merge.num_splits = plan.num_splits;
  status = bf16 ? sm90::launch_merge<__nv_bfloat16>(merge, stream)
                : sm90::launch_merge<__half>(merge, stream);
  check_cuda(status, "launching the sm90 split merge kernel");
}

}  // namespace flashmsa
