// Host side of the Hopper backend: checks what only this backend requires (the device, dtypes,
// alignment for TMA and vector loads), encodes the K/V tensor maps, sizes the grid from shapes
// alone (no host synchronisation, so calls can be captured in CUDA graphs) and launches.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "api/backends.h"
#include "common/error.h"
#include "sm90/decode_launch.h"
#include "sm90/kernel_traits.h"
#include "sm90/merge.h"
#include "sm90/params.h"
#include "sm90/prefill_launch.h"
#include "sm90/split_rules.h"

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

// K or V as a TMA tensor with 64-dim x 128-token boxes, 128-byte swizzle and the L2 promotion
// tile_config chose. Out-of-range boxes (a flat request's last block past total_k) are
// zero-filled by the hardware.
CUtensorMap make_kv_tensor_map(const char* name, const void* base, const flashmsa_args& args,
                               int64_t stride_page, int64_t stride_head, int64_t stride_token,
                               CUtensorMapL2promotion promotion) {
  CUtensorMap map;
  std::memset(&map, 0, sizeof(map));
  const int64_t extent = args.is_paged ? args.num_pages : args.total_k;
  if (extent == 0) return map;  // no block can be selected: the map is never used
  constexpr int64_t kBytes = 2;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(args.head_dim),
                              static_cast<cuuint64_t>(args.is_paged ? 128 : args.total_k),
                              static_cast<cuuint64_t>(args.num_kv_heads),
                              static_cast<cuuint64_t>(args.num_pages)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(stride_token * kBytes),
                                 static_cast<cuuint64_t>(stride_head * kBytes),
                                 static_cast<cuuint64_t>(stride_page * kBytes)};
  const cuuint32_t box[4] = {sm90::kPanelElems, sm90::kBlockKeys, 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type = args.q_dtype == FLASHMSA_DTYPE_BF16
                                       ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUresult status = tensor_map_encoder()(
      &map, type, args.is_paged ? 4 : 3, const_cast<void*>(base), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) {
    throw Error(FLASHMSA_ERROR_CUDA, std::string("cuTensorMapEncodeTiled failed for ") + name +
                                         " (error " + std::to_string(status) + ")");
  }
  return map;
}

// How rows are tiled and whether a tile's blocks are split across CTAs: from shapes only, so
// that the workspace size and the grid of a call never depend on device data.
struct TileConfig {
  int32_t heads_per_chunk, num_head_chunks, tokens_per_warpgroup, tokens_per_tile;
  int32_t num_consumer_warpgroups, ctas_per_sm;
  int64_t max_tiles;  // per head column
  int32_t num_splits;
  bool cluster_reduce;   // params.h
  bool push_reduce = false;  // params.h (smem_layout reads it before tile_config sets it)
  bool tiles_outer;      // params.h
  bool kv_evict_first;   // L2 policy of the K/V loads
  CUtensorMapL2promotion kv_l2_promotion;  // of the K/V tensor maps
  int32_t inflight_throttle = 0;  // params.h (make_prefill_params applies it to rings of 2+ stages)
  // The one-token decode kernel (decode_kernel.cuh) instead of prefill_kernel: one CTA per
  // (query row, KV head, split).
  bool one_token_kernel = false;

  // Split partials go through the workspace and the merge kernel (splits outside a cluster).
  bool merges_in_workspace() const { return num_splits > 1 && !cluster_reduce; }
};

// Measurement overrides of the shape-derived launch choices, for sweeps on the GPU machine
// (scripts/kernel_smoke.py --tune): FLASHMSA_TUNE_SPLITS, FLASHMSA_TUNE_TILES_OUTER,
// FLASHMSA_TUNE_EVICT_FIRST, FLASHMSA_TUNE_SPECULATE and FLASHMSA_TUNE_DEEP_PIPELINE (0 or 1),
// FLASHMSA_TUNE_ONE_TOKEN (0: never the one-token kernel, 2: for every call of up to 8 rows a
// request, split_rules.h),
// FLASHMSA_TUNE_DECODE_LIKE (1: the one-consumer decode shape for any call),
// FLASHMSA_TUNE_THROTTLE (0, 1, 2: K/V loads in flight per CTA, producer.cuh),
// FLASHMSA_TUNE_PACE (0 off, else 9 + slack in quarter blocks, 1-17: pacing.cuh),
// FLASHMSA_TUNE_CTAS_PER_SM (1: one decode CTA per SM, deep pipeline, whatever the grid),
// FLASHMSA_TUNE_STAGES (the decode kernel's most stages, 1-4), FLASHMSA_TUNE_PREFILL_STAGES
// (the two-consumer kernel's, 2-4), FLASHMSA_TUNE_PUSH (0: one-token
// cluster reductions pull instead of push), FLASHMSA_TUNE_CLUSTER (0: decode splits merge
// through the workspace instead of their cluster), FLASHMSA_TUNE_SORTED_WARP_PLAN (0: the
// two-consumer kernel plans block-wide, 2: its warp plan sorts, warp_plan_kind),
// FLASHMSA_TUNE_L2_PROMOTION (the K/V maps' L2 promotion: 0 none, 1 128 B, 2 256 B). Unset, or
// not a number in [minimum, maximum], leaves the heuristic's value.
int32_t tuning_override(const char* name, int32_t value, int32_t minimum, int32_t maximum) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return value;
  char* end = nullptr;
  const long parsed = std::strtol(text, &end, 10);
  if (*end != '\0' || parsed < minimum || parsed > maximum) return value;
  return static_cast<int32_t>(parsed);
}

// Cached per device: tile_config runs twice per call (workspace size, then launch).
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

sm90::SmemLayout smem_layout(const flashmsa_args& args, const TileConfig& c);

// max_active_decode_clusters of the decode kernel in use, cached per (device, kernel, shared
// memory, cluster size): the occupancy query costs more than a launch.
int max_active_decode_clusters(int device, bool one_token_kernel, uint32_t shared_bytes,
                               int cluster_size) {
  static std::mutex mutex;
  static std::map<std::tuple<int, bool, uint32_t, int>, int> cache;
  const auto key = std::make_tuple(device, one_token_kernel, shared_bytes, cluster_size);
  std::lock_guard<std::mutex> lock(mutex);
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  const int clusters =
      one_token_kernel ? sm90::max_active_one_token_clusters(shared_bytes, cluster_size)
                       : sm90::max_active_decode_clusters(shared_bytes, cluster_size);
  cache.emplace(key, clusters);
  return clusters;
}

// The rows every request holds when they may all hold the same number (total_q = B x r: decode
// batches, multi-token prediction), else 0. The host cannot know that they do (cu_seqlens_q is
// on the device): the split count assumes it, and warp planning guesses tiles from it.
int64_t uniform_rows_per_request(const flashmsa_args& args) {
  return args.total_q % args.batch_size == 0 ? args.total_q / args.batch_size : 0;
}

TileConfig tile_config(const flashmsa_args& args) {
  TileConfig c;
  const int32_t group_size = static_cast<int32_t>(args.num_qo_heads / args.num_kv_heads);
  const int32_t topk = static_cast<int32_t>(args.topk);
  // Rows of a warpgroup: whole tokens' head groups (or 64-head chunks of a wider group), and
  // few enough tokens that a tile's tokens x topk candidates fit the planning buffers.
  c.heads_per_chunk = std::min(group_size, sm90::kRowsPerWarpgroup);
  c.num_head_chunks = (group_size + c.heads_per_chunk - 1) / c.heads_per_chunk;
  // Decode-like calls (at most one warpgroup's tokens per request on average) run the
  // one-consumer kernel, two CTAs per SM, with tiles of one warpgroup's tokens.
  const int32_t rows_tokens = sm90::kRowsPerWarpgroup / c.heads_per_chunk;
  const int64_t sms = multiprocessor_count(args.device_index);
  // At most 16 heads per KV head and 32 index entries per row: the one-token decode kernel,
  // whose tiles are single rows, for decode batches and for multi-token prediction whose rows
  // fit one CTA per SM (split_rules.h).
  const bool one_token_shape = args.total_q <= INT32_MAX && group_size <= sm90::kDecodeRows &&
                               topk <= 32;
  c.one_token_kernel = sm90::takes_one_token_kernel(
      one_token_shape, args.total_q, args.batch_size, args.num_kv_heads, sms,
      tuning_override("FLASHMSA_TUNE_ONE_TOKEN", 1, 0, 2));
  // FLASHMSA_TUNE_DECODE_LIKE=1 (a measurement): the one-consumer shape for any call, its tiles
  // one warpgroup's tokens (multi-token prediction of 8 tokens: two tiles a request).
  const bool decode_like = args.total_q <= args.batch_size * rows_tokens || c.one_token_kernel ||
                           tuning_override("FLASHMSA_TUNE_DECODE_LIKE", 0, 0, 1) == 1;
  c.num_consumer_warpgroups = decode_like ? 1 : 2;
  c.ctas_per_sm = decode_like ? 2 : 1;
  c.tokens_per_warpgroup =
      std::min(rows_tokens, sm90::kMaxCandidates / (c.num_consumer_warpgroups * topk));
  if (c.one_token_kernel) c.tokens_per_warpgroup = 1;
  c.tokens_per_tile = c.num_consumer_warpgroups * c.tokens_per_warpgroup;
  // Tiles never straddle requests, so there are at most ceil(total_q / T) + B of them, plus two
  // for rows outside every request (they get zeros); CTAs past the real count (known only on
  // the device) exit after planning. The one-token kernel's tiles are the rows themselves.
  const int64_t query_tiles = (args.total_q + c.tokens_per_tile - 1) / c.tokens_per_tile;
  c.max_tiles = c.one_token_kernel ? args.total_q : query_tiles + args.batch_size + 2;
  // Decode: too few (tile, head) units to fill the machine's CTA slots. Split each tile's blocks
  // over num_splits CTAs (at least one block each) and merge the partials; skip it when the
  // grid is already (nearly) full. The units are counted as the call most likely has them:
  // where every request may hold the same number of rows r (total_q = B x r: decode batches,
  // multi-token prediction) they most likely do, and then there are B x ceil(r / T) tiles, where
  // the grid's bound (ceil(total_q / T) + B, each tile at least one token) is up to twice that.
  // The split count only sets the speed, and is still derived from shapes alone. Measured
  // (H200, two-consumer kernel, 8 tokens a request, docs/performance.md): batch 4 8 splits 48.4
  // us (the bound's 4: 57.6), batch 8 4 splits 73.5 (2: 93.3), batch 12 2 splits 106.9 (1:
  // 161.0), batch 16 2 splits 128.1 (1: 162.5).
  const int64_t tokens_per_request = std::max<int64_t>(1, args.total_q / args.batch_size);
  const int64_t uniform_rows = uniform_rows_per_request(args);
  const int64_t likely_tiles =
      uniform_rows > 0
          ? args.batch_size * ((uniform_rows + c.tokens_per_tile - 1) / c.tokens_per_tile)
          : std::min(query_tiles + args.batch_size, args.total_q);
  const int64_t units = likely_tiles * args.num_kv_heads * c.num_head_chunks;
  const int64_t slots = sms * c.ctas_per_sm;
  const int64_t max_union = std::min<int64_t>(c.tokens_per_tile, tokens_per_request) * topk;
  // Measured on the H200 (docs/performance.md): an extra split costs more than it gains once the
  // grid holds about one CTA per slot (batch 64: 1 split 75-79 us, 2 splits 85 us).
  // The most splits a launch can run (FLASHMSA_TUNE_SPLITS's range): one block each, the merge
  // kernel's limit, and for decode, which combines its splits inside a thread-block cluster (no
  // merge kernel, no workspace), the largest cluster Hopper allows.
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(max_union, sm90::kMaxMergeSplits));
  const int32_t most_splits = static_cast<int32_t>(
      decode_like ? std::min<int64_t>(sm90::kMaxClusterSplits, most) : most);
  // The heuristic stops at 16 for the two-consumer kernel too: its splits each plan their
  // tile's whole union block-wide (about 10 us at 8 tokens a request), so splits past 16 add
  // CTAs that mostly plan. Measured (H200, batch 1, 8 tokens a request, docs/performance.md):
  // 16 splits 28.3 us, 33 splits 34.5.
  constexpr int64_t kMostChosenSplits = 16;
  c.num_splits = 1;
  if (units > 0 && units * 10 < slots * 9) {
    c.num_splits = static_cast<int32_t>(std::clamp<int64_t>(
        slots / units, 1, std::min<int64_t>(most_splits, kMostChosenSplits)));
  }
  // All of a decode call's clusters must be resident at once: a second wave pays planning and
  // a whole slice again (measured: batch 16 with clusters of 4 took 38 us, of 2 27.6 us).
  auto clusters_resident = [&](const TileConfig& config) {
    if (config.num_splits <= 1) return true;
    const uint32_t shared_bytes =
        smem_layout(args, config).bytes + sm90::kSharedMemoryAlignmentSlack;
    return max_active_decode_clusters(args.device_index, config.one_token_kernel, shared_bytes,
                                      config.num_splits) >= units;
  };
  if (decode_like) {
    while (!clusters_resident(c)) --c.num_splits;
    // Where the units fit one CTA per SM, take the most splits that still do: more splits
    // measured slower, although two CTAs per SM would hold them. Measured (H200, one-token
    // decode consumer, docs/performance.md; the default then ran the deep pipeline below):
    // batch 8 4 splits 13.3-14.0 us on rotating inputs (8: 17.5), batch 16 2 splits 21.3-22.7
    // us (4: 25.7), batch 32 1 split 39.4 us (2: 42.3).
    const int64_t splits_one_cta_per_sm = units > 0 ? sms / units : 0;
    if (splits_one_cta_per_sm >= 1) {
      c.num_splits = static_cast<int32_t>(std::min<int64_t>(c.num_splits, splits_one_cta_per_sm));
    }
    // The one-token kernel gives each split at least two blocks, so that a CTA's second block
    // streams while its first is computed, unless splits of one block each take at most half
    // the SMs: then each has an SM to itself and the next call's CTAs launch on the other half
    // and wait there (programmatic dependent launch). Measured (H200, docs/performance.md,
    // rotating inputs): batch 1 16 splits 6.0 us, 8 splits 6.3; batch 2 16 splits 8.2, 8
    // splits 7.3; batch 3 11 splits 9.4, 8 splits 8.0.
    const bool one_block_splits_fit_half_the_sms =
        units * std::min<int64_t>(c.num_splits, max_union) * 2 <= sms;
    if (c.one_token_kernel && !one_block_splits_fit_half_the_sms) {
      c.num_splits = static_cast<int32_t>(
          std::min<int64_t>(c.num_splits, std::max<int64_t>(1, max_union / 2)));
    }
    // Short one-token splits leave some SMs free (split_rules.h).
    if (c.one_token_kernel) {
      c.num_splits = sm90::short_one_token_splits(units, sms, max_union, c.num_splits);
    }
  }
  c.num_splits = tuning_override("FLASHMSA_TUNE_SPLITS", c.num_splits, 1, most_splits);
  // The grid's likely CTAs fit one per SM: one wave even at one CTA per SM.
  const bool fits_one_cta_per_sm = units * c.num_splits <= sms;
  // Decode grids run two CTAs per SM of one K and one V stage each, also where the grid has no
  // more CTAs than the machine has SMs. One CTA per SM with three stages there (the deep
  // pipeline, FLASHMSA_TUNE_DEEP_PIPELINE=1, now a measurement) keeps the next blocks in flight
  // while a block is computed, but past 64 KiB in flight the SMs' shares of the DRAM bandwidth
  // turn unequal (scripts/sm_bandwidth.cu: 36 against 47-49 GB/s), and a call ends with its
  // slowest split. Measured on rotating inputs (H200, docs/performance.md): batch 16 19.9 us
  // against 21.2-22.9 with the deep pipeline, batch 32 35.5 against 37.2-39.8, batch 2 6.6
  // against 7.0; 2 and 4 tokens a request at batch 8 and 16 2-5% faster; the rest equal.
  // Splits of one block, which had nothing to overlap, were at two per SM already.
  const bool splits_hold_one_block = max_union <= c.num_splits;
  if (decode_like && fits_one_cta_per_sm && !splits_hold_one_block &&
      tuning_override("FLASHMSA_TUNE_DEEP_PIPELINE", 0, 0, 1) != 0) {
    c.ctas_per_sm = 1;
    if (!clusters_resident(c)) c.ctas_per_sm = 2;
  }
  // FLASHMSA_TUNE_CTAS_PER_SM=1 (a measurement): the deep pipeline for any decode grid, in as
  // many waves as it takes (batch 64: 256 CTAs of three stages over 132 SMs).
  if (decode_like && tuning_override("FLASHMSA_TUNE_CTAS_PER_SM", 0, 1, 2) == 1) {
    c.ctas_per_sm = 1;
  }
  // FLASHMSA_TUNE_CLUSTER=0 (a measurement): decode splits are independent CTAs whose partials
  // the merge kernel combines from the workspace, so the block scheduler hands a freed slot the
  // next split wherever an SM finishes early (batch 64's SMs end 53-68 us apart).
  c.cluster_reduce = decode_like && c.num_splits > 1 &&
                     tuning_override("FLASHMSA_TUNE_CLUSTER", 1, 0, 1) != 0;
  // The receive buffer ((splits - 1) x ceil(16 / splits) rows, at most 14.2 KiB) fits beside
  // the stages at one CTA per SM, and beside the one stage at two per SM for the one-token
  // kernel, which has no warp planning scratch (kernel_traits.h asserts it).
  const bool receive_buffer_fits = c.ctas_per_sm == 1 || c.one_token_kernel;
  c.push_reduce = c.cluster_reduce && receive_buffer_fits &&
                  c.heads_per_chunk <= sm90::kDecodeRows &&
                  tuning_override("FLASHMSA_TUNE_PUSH", 1, 0, 1) != 0;
  // Multi-token prediction (every request's rows one two-consumer tile) streams whole unions at
  // one CTA per SM through rings of two stages, 128 KiB in flight per SM, where the SMs' shares of
  // the DRAM bandwidth turn unequal; where the grid is one wave, the call ends with its slowest
  // CTA. The producer there issues a block's K only once the previous block's V has landed
  // (throttle 2: 64 KiB in flight). Grids of several waves balance themselves (a freed SM takes
  // the next CTA) and only lose by it. Measured (H200, 8 tokens a request, docs/performance.md):
  // batch 32 218.6-220.0 us against 219.7-220.9 (benchmark), decode-suite rows at batch 8 and 32
  // 1-2% faster at KV 50000-200000, at batch 64 and 128 (two and four waves) up to 1.7% slower.
  // Prefill tiles (requests of several tiles) keep their rings unthrottled.
  const bool one_tile_per_request = uniform_rows > 0 && uniform_rows <= c.tokens_per_tile;
  c.inflight_throttle = !decode_like && one_tile_per_request && fits_one_cta_per_sm ? 2 : 0;
  c.tiles_outer = tuning_override("FLASHMSA_TUNE_TILES_OUTER", decode_like, 0, 1) != 0;
  // K/V loads evict first (kernel_traits.h) where a call reads each block once per (request,
  // KV head): decode, and multi-token prediction, whose requests are one tile each. Prefill's
  // neighbouring tiles of a head share blocks and keep them in L2. Measured (H200, MTP 8 tokens,
  // docs/performance.md, seventeenth session): batch 32 215.8 us against 217.3-217.8, batch 24
  // 173.5 against 176.1-176.2.
  c.kv_evict_first = tuning_override("FLASHMSA_TUNE_EVICT_FIRST",
                                     decode_like || one_tile_per_request, 0, 1) != 0;
  // No L2 promotion of the K/V boxes (FLASHMSA_TUNE_L2_PROMOTION: 0 none, 1 128 B, 2 256 B).
  // A box is 128 rows of 128 bytes, one 64-dim half of each key's 256-byte row, and both halves
  // of a block are loaded back to back, so promotion to 256 bytes fetches nothing a box does
  // not read anyway; yet it slows the reads of random 32 KiB blocks by 7% (scripts/
  // gather_ceiling.cu: batch 64's blocks read in 68.3 us promoted, 63.9 not). Measured
  // (H200, benchmark, docs/performance.md, twenty-second session): batch 64 71.2 -> 67.9 us,
  // batch 128 134.6 -> 128.8, multi-token prediction 212.5 -> 197.0; prefill unchanged
  // (aggregate 143.7 -> 143.9 TFLOP/s).
  static constexpr CUtensorMapL2promotion kPromotions[] = {
      CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B};
  c.kv_l2_promotion = kPromotions[tuning_override("FLASHMSA_TUNE_L2_PROMOTION", 0, 0, 2)];
  return c;
}

// Tiles of at most 128 candidates plan in one warp (params.h): decode launches in entry order,
// the two-consumer kernel ascending, through a bitmap of the request's blocks
// (warp_planning.cuh), or through a sorting network where a request may have more blocks than
// the bitmap holds (5.7M keys: only the table's width or the flat cache's rows bound a request's
// length on the host). FLASHMSA_TUNE_SORTED_WARP_PLAN (measurements) gives the two-consumer
// kernel the block-wide plan (planning.cuh) at 0, the warp plan's sorting network at 2.
int32_t warp_plan_kind(const flashmsa_args& args, const TileConfig& c) {
  if (c.tokens_per_tile * args.topk > sm90::kWarpPlanMaxEntries) return sm90::kWarpPlanNone;
  if (c.num_consumer_warpgroups == 1) return sm90::kWarpPlanEntryOrder;
  const int64_t bitmap_blocks = int64_t{32} * sm90::kUnionBitmapMaxWords;
  const bool bitmap_holds_requests = args.is_paged
                                         ? args.max_pages_per_request <= bitmap_blocks
                                         : args.total_k <= bitmap_blocks * sm90::kBlockKeys;
  switch (tuning_override("FLASHMSA_TUNE_SORTED_WARP_PLAN", 1, 0, 2)) {
    case 0: return sm90::kWarpPlanNone;
    case 2: return sm90::kWarpPlanSorted;
    default: return bitmap_holds_requests ? sm90::kWarpPlanBitmap : sm90::kWarpPlanSorted;
  }
}

// Shared memory: Q buffer(s), then the K and V rings with as many stages as fit, then the
// planning buffers and the barrier header.
sm90::SmemLayout smem_layout(const flashmsa_args& args, const TileConfig& c) {
  using namespace sm90;
  auto align = [](uint32_t bytes, uint32_t to) { return (bytes + to - 1) / to * to; };
  SmemLayout layout;
  const bool shared_q = c.num_consumer_warpgroups == 1;
  const uint32_t q_bytes = 2 * kQPanelBytes;
  layout.q[0] = 0;
  layout.q[1] = shared_q ? 0 : q_bytes;
  const uint32_t q_end = shared_q ? q_bytes : 2 * q_bytes;
  const uint32_t splits = static_cast<uint32_t>(c.num_splits);
  layout.push_slot_bytes = push_slot_bytes(splits);
  layout.push_slot_rows = static_cast<int32_t>(push_slot_rows(splits));
  const uint32_t received_bytes = c.push_reduce ? receive_buffer_bytes(splits) : 0;
  layout.received = q_end;
  const uint32_t rings_begin = align(q_end + received_bytes, 1024);
  const uint32_t tokens = static_cast<uint32_t>(c.tokens_per_tile);
  const uint32_t candidates = tokens * static_cast<uint32_t>(args.topk);
  layout.mask_words = static_cast<int32_t>((tokens + 31) / 32);
  const uint32_t warp_scratch_bytes =
      warp_plan_kind(args, c) != kWarpPlanNone && !c.one_token_kernel ? kWarpScratchBytes : 0;
  const uint32_t planning_bytes =
      align(candidates * 4, 16) * 2 + align(candidates * layout.mask_words * 4, 16) +
      align(tokens * 4, 16) * 2 + warp_scratch_bytes + align(sizeof(SmemHeader), 16);
  const uint32_t stage_bytes = 2 * kKvTileBytes;  // K and V of one block
  // Two CTAs per SM share its 228 KiB, less 1 KiB the system reserves per CTA.
  const uint32_t budget = c.ctas_per_sm == 1 ? kSharedMemoryLimit : kTwoCtasPerSmSharedBytes;
  const uint32_t available = budget - kSharedMemoryAlignmentSlack;
  const uint32_t most_stages =
      c.num_consumer_warpgroups == 2
          ? tuning_override("FLASHMSA_TUNE_PREFILL_STAGES", kPrefillMaxStages, 2, kMaxStages)
          : tuning_override("FLASHMSA_TUNE_STAGES", kMaxStages, 1, kMaxStages);
  layout.num_stages = static_cast<int32_t>(std::min<uint32_t>(
      most_stages, (available - rings_begin - planning_bytes) / stage_bytes));
  // The two-consumer kernel exchanges warpgroup state through two K stages (consumer.cuh).
  const int32_t fewest = c.num_consumer_warpgroups == 2 ? 2 : 1;
  if (layout.num_stages < fewest) {
    throw Error(FLASHMSA_ERROR_INTERNAL, "shared memory plan has too few stages");
  }
  layout.k = rings_begin;
  layout.v = layout.k + layout.num_stages * kKvTileBytes;
  uint32_t offset = layout.v + layout.num_stages * kKvTileBytes;
  layout.union_blocks = offset;
  offset += align(candidates * 4, 16);
  layout.union_coords = offset;
  offset += align(candidates * 4, 16);
  layout.token_masks = offset;
  offset += align(candidates * layout.mask_words * 4, 16);
  layout.token_key_limit = offset;
  offset += align(tokens * 4, 16);
  layout.token_first_negative = offset;
  offset += align(tokens * 4, 16);
  layout.warp_scratch = offset;
  offset += warp_scratch_bytes;
  layout.header = offset;
  layout.bytes = offset + align(sizeof(SmemHeader), 16);
  return layout;
}

// Workspace: the split partials, each region 256-byte aligned.
struct WorkspaceLayout {
  size_t partial_out = 0, partial_lse = 0, partial_lse_t = 0, bytes = 0;
};

WorkspaceLayout workspace_layout(const flashmsa_args& args, const TileConfig& tiles) {
  WorkspaceLayout layout;
  if (!tiles.merges_in_workspace()) return layout;
  auto align = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t rows = static_cast<size_t>(tiles.num_splits) * args.total_q * args.num_qo_heads;
  layout.partial_out = 0;
  layout.partial_lse = align(rows * sm90::kHeadDim * sizeof(float));
  layout.partial_lse_t = layout.partial_lse + align(rows * sizeof(float));
  layout.bytes = layout.partial_lse_t + align(rows * sizeof(float));
  return layout;
}

sm90::PrefillParams make_prefill_params(const flashmsa_args& args, const TileConfig& tiles) {
  sm90::PrefillParams p;
  std::memset(&p, 0, sizeof(p));
  p.tma_k = make_kv_tensor_map("k", args.k, args, args.k_stride_page, args.k_stride_head,
                               args.k_stride_token, tiles.kv_l2_promotion);
  p.tma_v = make_kv_tensor_map("v", args.v, args, args.v_stride_page, args.v_stride_head,
                               args.v_stride_token, tiles.kv_l2_promotion);
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
  p.max_pages = args.is_paged ? args.max_pages_per_request : 0;
  p.num_qo_heads = static_cast<int32_t>(args.num_qo_heads);
  p.num_kv_heads = static_cast<int32_t>(args.num_kv_heads);
  p.group_size = static_cast<int32_t>(args.num_qo_heads / args.num_kv_heads);
  p.topk = static_cast<int32_t>(args.topk);
  p.topk_divisor = fast_divisor(static_cast<uint32_t>(args.topk));
  p.is_paged = args.is_paged;
  p.causal = args.causal;
  p.q_offset_mode = args.q_offset_mode;
  p.q_offset_value = args.q_offset_value;

  p.heads_per_chunk = tiles.heads_per_chunk;
  p.heads_per_chunk_divisor = fast_divisor(static_cast<uint32_t>(tiles.heads_per_chunk));
  p.num_head_chunks = tiles.num_head_chunks;
  p.tokens_per_warpgroup = tiles.tokens_per_warpgroup;
  p.tokens_per_tile = tiles.tokens_per_tile;
  p.num_splits = tiles.num_splits;
  p.splits_divisor = fast_divisor(static_cast<uint32_t>(tiles.num_splits));
  p.cluster_reduce = tiles.cluster_reduce;
  p.push_reduce = tiles.push_reduce;
  p.num_consumer_warpgroups = tiles.num_consumer_warpgroups;
  p.uniform_rows =
      args.total_q <= INT32_MAX ? static_cast<int32_t>(uniform_rows_per_request(args)) : 0;
  p.warp_planning = warp_plan_kind(args, tiles);
  p.speculate_first_block = tuning_override("FLASHMSA_TUNE_SPECULATE", 1, 0, 1);
  p.tiles_outer = tiles.tiles_outer;
  p.max_tiles = tiles.max_tiles;
  p.tiles_divisor = fast_divisor(static_cast<uint32_t>(tiles.max_tiles));
  p.columns_divisor =
      fast_divisor(static_cast<uint32_t>(args.num_kv_heads * tiles.num_head_chunks));
  p.head_chunks_divisor = fast_divisor(static_cast<uint32_t>(tiles.num_head_chunks));
  p.kv_cache_hint = tiles.kv_evict_first ? sm90::kCacheHintEvictFirst : sm90::kCacheHintEvictNormal;
  p.smem_layout = smem_layout(args, tiles);
  // Rings of one stage serialise their loads already (and the throttle's wait needs two).
  p.inflight_throttle =
      p.smem_layout.num_stages >= 2
          ? tuning_override("FLASHMSA_TUNE_THROTTLE", tiles.inflight_throttle, 0, 2)
          : 0;
  // Pacing (pacing.cuh) where the throttle's rule holds (grids of one wave, whose call ends
  // with its slowest CTA): a CTA with more blocks left than the running CTAs' mean loads
  // unthrottled. Measured (H200, 8 tokens a request, docs/performance.md, twentieth session):
  // batch 32 213.2 us against 215.2-215.7, 24 165.1 against 170.6, 16 114.9 against 118.4, 8
  // 64.2 against 65.9; slacks of -0.5 to -2 blocks were slower, +0.5 the same.
  p.pacing_slack = tiles.inflight_throttle > 0
                       ? tuning_override("FLASHMSA_TUNE_PACE", sm90::kPacingSlackZero, 0, 17)
                       : 0;

  constexpr double kLog2e = 1.4426950408889634;
  p.scale_log2 = static_cast<float>(static_cast<double>(args.softmax_scale) *
                                    args.k_global_scale * kLog2e);
  p.v_global_scale = args.v_global_scale;
  p.lse_temperature = args.lse_temperature_scale;
  return p;
}

}  // namespace

bool sm90_compiled() { return true; }

size_t sm90_workspace_bytes(const flashmsa_args& args) {
  if (args.total_q == 0 || args.batch_size == 0) return 0;
  DeviceScope device_scope(args.device_index);
  return workspace_layout(args, tile_config(args)).bytes;
}

void run_sm90(const flashmsa_args& args) {
  if (args.kv_dtype != args.q_dtype) {
    fail_not_supported("k/v: fp8 and NVFP4 K/V run on the CPU backend only in this release; the "
                       "CUDA kernels take K/V of q's dtype (bf16 or fp16)");
  }
  DeviceScope device_scope(args.device_index);
  require_hopper(args.device_index);
  require_aligned("q", args.q, {args.q_stride_token, args.q_stride_head}, 2, 16);
  require_aligned("out", args.out, {args.out_stride_token, args.out_stride_head}, 2, 16);
  const int64_t kv_page_stride_k = args.is_paged ? args.k_stride_page : 0;
  const int64_t kv_page_stride_v = args.is_paged ? args.v_stride_page : 0;
  require_aligned("k", args.k, {kv_page_stride_k, args.k_stride_head, args.k_stride_token}, 2, 16);
  require_aligned("v", args.v, {kv_page_stride_v, args.v_stride_head, args.v_stride_token}, 2, 16);
  if (args.total_q == 0 || args.batch_size == 0) return;

  const TileConfig tiles = tile_config(args);
  sm90::PrefillParams params = make_prefill_params(args, tiles);
  const WorkspaceLayout layout = workspace_layout(args, tiles);
  if (layout.bytes > args.workspace_bytes) {
    fail_invalid("workspace_bytes: this call needs " + std::to_string(layout.bytes) +
                 " bytes of workspace (flashmsa_workspace_bytes), got " +
                 std::to_string(args.workspace_bytes));
  }
  uint8_t* workspace = static_cast<uint8_t*>(args.workspace);
  if (tiles.merges_in_workspace()) {
    params.partial_out = reinterpret_cast<float*>(workspace + layout.partial_out);
    params.partial_lse = reinterpret_cast<float*>(workspace + layout.partial_lse);
    params.partial_lse_t = reinterpret_cast<float*>(workspace + layout.partial_lse_t);
  }
  // One linear grid dimension; the kernel splits blockIdx.x into (tile, head column, split) in
  // the order params.tiles_outer says (planning.cuh: cta_work).
  const int64_t columns = args.num_kv_heads * params.num_head_chunks;
  const int64_t ctas = tiles.max_tiles * columns * tiles.num_splits;
  if (ctas > INT32_MAX) {
    fail_not_supported("problem too large for one launch: " + std::to_string(tiles.max_tiles) +
                       " query tiles x " + std::to_string(columns) + " head columns x " +
                       std::to_string(tiles.num_splits) + " splits");
  }
  const dim3 grid(static_cast<unsigned>(ctas));
  const bool temperature_lse = args.lse_t != nullptr;
  cudaStream_t stream = static_cast<cudaStream_t>(args.stream);
  const bool bf16 = args.q_dtype == FLASHMSA_DTYPE_BF16;
  cudaError_t status;
  if (tiles.one_token_kernel) {
    status = bf16 ? sm90::launch_one_token_decode<__nv_bfloat16>(params, grid, temperature_lse,
                                                                 stream)
                  : sm90::launch_one_token_decode<__half>(params, grid, temperature_lse, stream);
    check_cuda(status, "launching the sm90 one-token decode kernel");
  } else {
    status = bf16 ? sm90::launch_prefill<__nv_bfloat16>(params, grid, temperature_lse, stream)
                  : sm90::launch_prefill<__half>(params, grid, temperature_lse, stream);
    check_cuda(status, "launching the sm90 prefill kernel");
  }
  if (!tiles.merges_in_workspace()) return;

  sm90::MergeParams merge;
  merge.partial_out = params.partial_out;
  merge.partial_lse = params.partial_lse;
  merge.partial_lse_t = params.partial_lse_t;
  merge.output = params.output;
  merge.total_q = args.total_q;
  merge.num_qo_heads = static_cast<int32_t>(args.num_qo_heads);
  merge.num_splits = tiles.num_splits;
  status = bf16 ? sm90::launch_merge<__nv_bfloat16>(merge, stream)
                : sm90::launch_merge<__half>(merge, stream);
  check_cuda(status, "launching the sm90 split merge kernel");
}

}  // namespace flashmsa
