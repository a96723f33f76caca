// Tile sizes, thread roles and the shared-memory plan of the Hopper prefill kernel.
#pragma once

#include <stdint.h>

namespace flashmsa::sm90 {

constexpr int kHeadDim = 128;
constexpr int kBlockKeys = 128;        // keys per selected block: one TMA box pair per operand
constexpr int kRowsPerWarpgroup = 64;  // wgmma M
// Two kernel shapes: 2 consumer warpgroups, one CTA per SM (prefill: 128 rows share each loaded
// block), and 1 consumer warpgroup, two CTAs per SM (decode: few rows per block; the second CTA
// hides the first one's planning and ramp-up, and twice the CTAs fit in one wave).
constexpr int kMaxConsumerWarpgroups = 2;
constexpr int kMaxThreads = 128 * (1 + kMaxConsumerWarpgroups);  // warpgroup 0 produces
// K and V have separate rings of stages: K of a block is released as soon as S = Q K^T is done,
// V after P V. SmemLayout gives a launch as many stages as fit, up to kMaxStages, and prefill up
// to kPrefillMaxStages: measured on the H200, a third stage made
// MiniMax-M3 prefill 5% slower. Decode grids run two CTAs per SM of one stage each; the
// test-only override deep_pipeline=1 (flashmsa_testing.h) gives those that fit one CTA per SM as
// many as fit, three (launch_plan.cpp says why it is off).
constexpr int kMaxStages = 4;
constexpr int kPrefillMaxStages = 2;
// Candidates (tokens x topk) one tile plans over; tiles are sized so that they never exceed it.
constexpr int kMaxCandidates = 2048;
constexpr int kMaxTileTokens = 128;
constexpr int kMaxMaskWords = kMaxTileTokens / 32;
constexpr int kSharedMemoryLimit = 227 * 1024;  // per block on sm_90
// Dynamic shared memory is only 16-byte aligned by contract; the layout starts at the next
// 1024-byte boundary, so each launch asks for layout.bytes plus this slack.
constexpr uint32_t kSharedMemoryAlignmentSlack = 1024;
// A panel is the 128-byte-wide column slice (64 bf16/fp16 values) that one 128B-swizzled TMA
// box or wgmma descriptor covers; head_dim 128 is two panels.
constexpr int kPanelElems = 64;
constexpr int kQPanelBytes = kRowsPerWarpgroup * 128;  // 8 KiB
constexpr int kKvPanelBytes = kBlockKeys * 128;        // 16 KiB
constexpr int kKvTileBytes = 2 * kKvPanelBytes;        // one operand of one block: 32 KiB
constexpr uint32_t kStageTxBytes = kKvTileBytes;       // one operand of one block

// How K and V are stored. kNative: q's dtype, loaded by TMA straight into the stage in the
// layout the consumers read. kFp8: E4M3, one byte a value: TMA lands a block's 128-byte rows
// (one 128B-swizzled box, 16 KiB) in a compact stage of its own (the token-warp and decode
// kernels: read where they landed and converted in registers, token_warp_consumer.cuh,
// decode_consumer.cuh) or in the upper half of a full 32 KiB stage (the union tile, which
// rewrites it in place as q's dtype before its wgmma read it, kv_convert.cuh).
// kFp8TokenScaled: kFp8 with per-token scales (token_scales.cuh), its own instantiation so that
// fp8 without them runs loops with no trace of them.
// kNvfp4: packed E2M1 pairs, 64-byte rows (one unswizzled box, 8 KiB, compact stages), with one
// E4M3 scale per 16 values that the producers stage beside the block (nvfp4_convert.cuh); only
// the token-warp and one-token consumers take it, converting in registers.
enum class KvFormat : int32_t { kNative = 0, kFp8 = 1, kFp8TokenScaled = 2, kNvfp4 = 3 };
constexpr bool is_fp8(KvFormat format) {
  return format == KvFormat::kFp8 || format == KvFormat::kFp8TokenScaled;
}
constexpr bool is_nvfp4(KvFormat format) { return format == KvFormat::kNvfp4; }
constexpr bool is_converted(KvFormat format) { return format != KvFormat::kNative; }
constexpr bool has_token_scales(KvFormat format) { return format == KvFormat::kFp8TokenScaled; }
// Formats whose blocks carry scales that the consumers read beside the data: NVFP4's block
// scales, fp8's per-token scales. Their full barriers count the 32 lanes of the staging warp
// besides the producer's arrive.
constexpr bool stages_scales(KvFormat format) {
  return is_nvfp4(format) || has_token_scales(format);
}
constexpr uint32_t full_barrier_arrivals(KvFormat format) { return stages_scales(format) ? 33 : 1; }
// The two-consumer union tile's fp8 and NVFP4 stages are rewritten as q's dtype by the
// producer warpgroup's warps 1-3 (convert_stages, producer.cuh) while the consumers compute the
// previous block; the consumers wait on the stage's converted barriers (kConverterThreads
// arrivals) instead of its full ones. NVFP4 lands in a ring of its own (SmemLayout::raw_k,
// raw_v: compact stages and their scales, loaded and staged by warp 0, released by the
// converters on the raw empty barriers), so its loads run ahead of the rewrites; fp8 lands in
// the upper half of the stage it is rewritten in (kv_convert.cuh). The one-consumer shape's
// consumers rewrite fp8 themselves (its one-token tiles read the landed bytes), and token warps
// convert in registers.
constexpr bool producer_converts(int consumers, KvFormat format, bool token_warps) {
  return consumers == 2 && is_converted(format) && !token_warps;
}
constexpr int kFirstConverterThread = 32;
constexpr uint32_t kConverterThreads = 96;
constexpr uint32_t kFp8TileBytes = kBlockKeys * kHeadDim;  // one operand of one block: 16 KiB
constexpr uint32_t kNvfp4RowBytes = kHeadDim / 2;
constexpr uint32_t kNvfp4TileBytes = kBlockKeys * kNvfp4RowBytes;  // 8 KiB
constexpr uint32_t kNvfp4ScaleTileBytes = kBlockKeys * kHeadDim / 16;  // a block's scales: 1 KiB
// Bytes one operand of one block lands as, and where in a full (kKvTileBytes) stage: fp8 in the
// upper half (kv_convert.cuh says why); compact stages (the token-warp kernel's, and every
// NVFP4 ring) hold the box alone, at their start.
constexpr uint32_t landed_tile_bytes(KvFormat format) {
  return is_nvfp4(format) ? kNvfp4TileBytes : is_fp8(format) ? kFp8TileBytes : kStageTxBytes;
}
constexpr uint32_t landing_offset(KvFormat format) {
  return is_converted(format) ? kKvTileBytes - landed_tile_bytes(format) : 0;
}

// Decode's KV split runs as one thread-block cluster per (tile, head column), at most 16 CTAs:
// twice the portable cluster size, which Hopper allows to kernels that opt in
// (cudaFuncAttributeNonPortableClusterSizeAllowed; cluster_reduce.cuh). Batch 1 of MiniMax-M3
// then runs one block per CTA.
constexpr int kMaxClusterSplits = 16;
// Named barrier of consumer warpgroup 0's 128 threads (warpgroup w uses 1 + w; 0 is
// __syncthreads): the one-token consumer's exchanges and the push reduction's own-rows barrier.
constexpr uint32_t kConsumerBarrier = 1;
// Named barrier of both consumer warpgroups of the prefill kernel (256 threads): the exchange of
// shared-rows mode and the rewrite of converted stages.
constexpr uint32_t kBothConsumersBarrier = 3;
// One-token decode tiles (decode_consumer.cuh) hold one mma.sync row tile of query heads.
constexpr int kDecodeRows = 16;
// What a split CTA of a one-token tile pushes into a row owner's shared memory (cluster_reduce.cuh:
// reduce_by_push): the owner's rows only, by their ordinal among its rows (split r owns rows r,
// r + S, ...; at most ceil(16 / S)): fp32 out [rows][128], then LSEs [rows] and temperature LSEs
// [rows], padded to 16 bytes. Each split receives num_splits - 1 of these. Slots of all 16 rows
// (8.1 KiB each) kept sixteen splits from running two CTAs per SM (121 KiB of receive buffer).
constexpr uint32_t push_slot_rows(uint32_t splits) { return (kDecodeRows + splits - 1) / splits; }
constexpr uint32_t push_slot_bytes(uint32_t splits) {
  return push_slot_rows(splits) * kHeadDim * sizeof(float) +
         (push_slot_rows(splits) * 2 * sizeof(float) + 15) / 16 * 16;
}
constexpr uint32_t receive_buffer_bytes(uint32_t splits) {
  return (splits - 1) * push_slot_bytes(splits);
}
// The largest receive buffer of any split count (15 splits: 14 slots of 2 rows, 14.2 KiB): it
// fits beside Q and one stage at two CTAs per SM (launch_plan.cpp: receive_buffer_fits).
constexpr uint32_t largest_receive_buffer_bytes() {
  uint32_t largest = 0;
  for (uint32_t splits = 2; splits <= kMaxClusterSplits; ++splits) {
    largest = receive_buffer_bytes(splits) > largest ? receive_buffer_bytes(splits) : largest;
  }
  return largest;
}
constexpr int kTwoCtasPerSmSharedBytes = (228 * 1024) / 2 - 1024;  // the system keeps 1 KiB a CTA
static_assert(2 * kQPanelBytes + largest_receive_buffer_bytes() + 2 * kKvTileBytes + 4096 +
                      kSharedMemoryAlignmentSlack <=
                  kTwoCtasPerSmSharedBytes,
              "a one-token CTA of two per SM must hold Q, the receive buffer, one K and V stage "
              "and its planning buffers (under 4 KiB)");

// L2 policies of the K/V loads (AttentionParams::kv_cache_hint, the TMA cache-hint operand):
// evict-normal for prefill (blocks are shared by neighbouring tiles of one head), evict-first
// for decode (each block is read once per call, and should not displace what the next kernels
// read: their code, parameters and metadata).
constexpr uint64_t kCacheHintEvictNormal = 0x1000000000000000ull;
constexpr uint64_t kCacheHintEvictFirst = 0x12F0000000000000ull;

// Register budgets (setmaxnreg): the producer warpgroup only issues TMA, the consumers hold the
// 64x128 fp32 S and O accumulators (64 + 64 registers per thread) plus P in 16-bit. setmaxnreg
// moves registers between the warpgroups of one CTA only: the sum may not pass what the launch
// gave the CTA (65536 / (threads x CTAs per SM), rounded down to 8, per thread), or the
// consumers' increase waits forever.
// Two consumers, one CTA per SM: 168 a thread at launch; 24 + 2 * 240 = 504 (fp8: 32 + 2 * 232,
// as its producer's loop spilled at 24; per-token fp8: 40 + 2 * 232, for the scale stager;
// NVFP4: 56 + 2 * 224, for the union tile's converter warps, which spilled their conversion at
// 40; its token warps, which share the budget, spill less at 224 than at 232).
// One consumer, two CTAs per SM: 128 at launch; 24 + 232 = 256 (per-token fp8: 40 + 216, for
// the scale stager: at 24 its loop and the plan it shares with the consumers spilled).
template <int kConsumers, KvFormat kKv = KvFormat::kNative>
struct RoleConfig {
  static constexpr bool kWideProducer = kConsumers == 2 && kKv != KvFormat::kNative;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kCtasPerSm = kConsumers == 1 ? 2 : 1;
  static constexpr bool kNvfp4Converters = kConsumers == 2 && is_nvfp4(kKv);
  static constexpr int kProducerRegisters =
      kNvfp4Converters ? 56 : stages_scales(kKv) ? 40 : kWideProducer ? 32 : 24;
  static constexpr int kConsumerRegisters =
      kConsumers == 1 ? (stages_scales(kKv) ? 216 : 232)
                      : (kNvfp4Converters ? 224 : kWideProducer ? 232 : 240);
  static constexpr int kLaunchRegisters = 65536 / (kThreads * kCtasPerSm) / 8 * 8;
  static_assert(kProducerRegisters + kConsumers * kConsumerRegisters <=
                    (1 + kConsumers) * kLaunchRegisters,
                "setmaxnreg cannot hand out more registers than the CTA was launched with");
};

// Shared memory: the big buffers sit at offsets chosen on the host (SmemLayout), so that one
// kernel serves prefill (two Q buffers) and decode (one shared Q buffer, more stages). Operands
// are 1024-byte aligned (TMA and wgmma require a 128B swizzle pattern to start there).
struct SmemHeader {
  uint64_t k_full[kMaxStages];   // TMA bytes of K landed
  uint64_t k_empty[kMaxStages];  // all consumer threads done with K of the stage
  uint64_t v_full[kMaxStages];
  uint64_t v_empty[kMaxStages];
  uint64_t k_converted[kMaxStages];  // producer_converts: the converter warps rewrote K
  uint64_t v_converted[kMaxStages];
  uint64_t raw_k_empty[kMaxStages];  // the converters are done with a raw stage (NVFP4)
  uint64_t raw_v_empty[kMaxStages];
  int32_t warp_totals[kMaxThreads / 32];  // planning's block-wide scan
  int32_t batch_index;
  int32_t tile_first_row;
  int32_t tile_num_tokens;
  int32_t request_seqlen_k;
  int32_t request_first_key_row;  // flat path: row of k/v holding the request's key 0
  int64_t tile_first_position;    // query position (causal) of tile token 0
  int32_t union_size;             // distinct selected blocks of the tile (warp planning)
  // Warp planning's speculative first block (warp_planning.cuh): its K and V land on these.
  uint64_t speculative_k_full;
  uint64_t speculative_v_full;
  int32_t speculative_issued;     // whether they are in use (the cluster reduction waits)
  int32_t speculative_block;      // the sorted plan's guess, from warp 1 to the producer
  int32_t speculative_coord;
  // The other splits' pushes of this split's owned rows landed (cluster_reduce.cuh).
  uint64_t received_full;
  // Pacing (pacing.cuh): the producer's steps issued, for the pacer; the pacer's verdict.
  int32_t pacing_progress;
  int32_t pacing_boost;
};

// Warp planning's scratch (SmemLayout::warp_scratch): the guessed request's page-table row,
// kPageRowLoadsPerThread entries per thread of warps 1 and up, then the union slot of each of
// the tile's (at most 128) index entries.
constexpr int kPageRowLoadsPerThread = 8;
constexpr int kPageRowCapacity = (kMaxThreads - 32) * kPageRowLoadsPerThread;
constexpr int kWarpPlanMaxEntries = 128;  // four per lane of one warp
constexpr uint32_t kWarpScratchBytes = (kPageRowCapacity + kWarpPlanMaxEntries) * 4;
// Once rule 2 is done with the page-table row, the two-consumer warp plan keeps a bitmap of the
// request's blocks there, then each word's count of the bits below it (warp_planning.cuh): so
// at most this many words, for requests of at most 32 x kUnionBitmapMaxWords blocks.
constexpr int kUnionBitmapMaxWords = kPageRowCapacity / 2;

// How a tile plans its union (AttentionParams::warp_planning): tiles of at most
// kWarpPlanMaxEntries candidates in one warp, the one-consumer shape in entry order, the
// two-consumer kernel ascending by block (through a bitmap of the request's blocks, or a sorting
// network where they do not fit it); larger tiles with every thread, sorted (planning.cuh).
constexpr int32_t kWarpPlanNone = 0, kWarpPlanEntryOrder = 1, kWarpPlanSorted = 2,
                  kWarpPlanBitmap = 3;

// AttentionParams::pacing_slack's zero: values 1-17 are slacks of -2 to +2 blocks in quarters.
constexpr int kPacingSlackZero = 9;

// Split partials merged through the workspace (merge.cu): two split LSEs per lane of the
// merging warp.
constexpr int kMaxMergeSplits = 64;

// Byte offsets from the 1024-aligned base of dynamic shared memory, computed by the launch plan.
// One operand's per-token scales of a block as the prefill kernel stages them (token_scales.cuh):
// the 128 keys' scales in four rows, one per accumulator column quad, each row's 32 scales
// contiguous and rows 40 floats apart (16-byte aligned rows whose writes fall in distinct banks).
constexpr int kStagedScaleRowFloats = 40;
constexpr int kStagedScaleFloats = 4 * kStagedScaleRowFloats;

struct SmemLayout {
  uint32_t q[kMaxConsumerWarpgroups];  // equal when the warpgroups share their rows
  uint32_t k, v;                       // rings of num_stages x 32 KiB (compact: 16 KiB)
  uint32_t raw_k, raw_v;               // NVFP4 union tile: raw_stages compact stages each, where
                                       // the converter warps read the landed boxes (else 0)
  int32_t raw_stages;
  uint32_t token_scales;               // per-token fp8 scales, num_stages x 2 x kStagedScaleFloats
                                       // (empty: the call has none, or the decode kernel); in
                                       // NVFP4 launches the staged block scales (num_stages,
                                       // or raw_stages, x 2 x kNvfp4ScaleTileBytes)
  uint32_t received;                   // (num_splits - 1) x push_slot_bytes, push_reduce only
  uint32_t push_slot_bytes;            // push_slot_bytes(num_splits)
  int32_t push_slot_rows;              // push_slot_rows(num_splits)
  uint32_t union_blocks;               // int32[tokens_per_tile * topk]: ascending block ids
  uint32_t union_coords;               // int32[...]: TMA coordinate, flat token row or page id
  uint32_t token_masks;                // uint32[...][mask_words]: bit t = tile token t chose it
  uint32_t token_key_limit;            // int32[tokens_per_tile]: keys [0, limit) are visible
  uint32_t token_first_negative;       // int32[tokens_per_tile]
  uint32_t warp_scratch;               // kWarpScratchBytes, launches that plan in one warp only
  uint32_t header;                     // SmemHeader
  int32_t num_stages;
  int32_t mask_words;
  uint32_t bytes;                      // total, without the alignment slack
};

#ifdef __CUDACC__  // the device view; the layout above is also the host's (launch_plan.h)
// The kernel's view of its shared memory: the 1024-aligned base plus a copy of the layout.
// The copy (not a reference to the __grid_constant__ parameter) lets the compiler read the
// offsets as constant-bank operands, and the base is derived from the extern __shared__ array
// by pointer arithmetic, so the compiler knows it is shared memory and emits LDS/STS rather
// than generic loads and stores.
struct Smem {
  uint8_t* base;
  SmemLayout layout;

  __device__ __forceinline__ SmemHeader& header() const {
    return *reinterpret_cast<SmemHeader*>(base + layout.header);
  }
  __device__ __forceinline__ uint8_t* q(int warpgroup) const {
    return base + (warpgroup == 0 ? layout.q[0] : layout.q[1]);  // no dynamic index: no stack
  }
  __device__ __forceinline__ uint8_t* k(int stage) const {
    return base + layout.k + stage * kKvTileBytes;
  }
  __device__ __forceinline__ uint8_t* v(int stage) const {
    return base + layout.v + stage * kKvTileBytes;
  }
  // The token-warp kernel's compact rings (token_warp_consumer.cuh): stages of one fp8 or
  // NVFP4 box (landed_tile_bytes each), read where TMA lands them.
  __device__ __forceinline__ uint8_t* compact_k(int stage, uint32_t slot_bytes) const {
    return base + layout.k + stage * slot_bytes;
  }
  __device__ __forceinline__ uint8_t* compact_v(int stage, uint32_t slot_bytes) const {
    return base + layout.v + stage * slot_bytes;
  }
  // The NVFP4 union tile's raw ring (producer_converts): one 8 KiB box a stage.
  __device__ __forceinline__ uint8_t* raw_k(int stage) const {
    return base + layout.raw_k + stage * kNvfp4TileBytes;
  }
  __device__ __forceinline__ uint8_t* raw_v(int stage) const {
    return base + layout.raw_v + stage * kNvfp4TileBytes;
  }
  // A stage's NVFP4 block scales as the producers stage them (nvfp4_convert.cuh:
  // stage_operand_scales): K's kNvfp4ScaleTileBytes, then V's.
  __device__ __forceinline__ uint8_t* staged_block_scales(int stage, bool value) const {
    return base + layout.token_scales + (2 * stage + (value ? 1 : 0)) * kNvfp4ScaleTileBytes;
  }
  // A stage's per-token scales of one operand (token_scales.cuh): K's kStagedScaleFloats, then
  // V's.
  __device__ __forceinline__ float* staged_token_scales(int stage, bool value) const {
    return reinterpret_cast<float*>(base + layout.token_scales) +
           (2 * stage + (value ? 1 : 0)) * kStagedScaleFloats;
  }
  __device__ __forceinline__ int32_t* union_blocks() const {
    return reinterpret_cast<int32_t*>(base + layout.union_blocks);
  }
  __device__ __forceinline__ int32_t* union_coords() const {
    return reinterpret_cast<int32_t*>(base + layout.union_coords);
  }
  __device__ __forceinline__ uint32_t* token_mask(int u) const {
    return reinterpret_cast<uint32_t*>(base + layout.token_masks) + u * layout.mask_words;
  }
  __device__ __forceinline__ int32_t* token_key_limit() const {
    return reinterpret_cast<int32_t*>(base + layout.token_key_limit);
  }
  __device__ __forceinline__ int32_t* token_first_negative() const {
    return reinterpret_cast<int32_t*>(base + layout.token_first_negative);
  }
  // Planning's scratch lives in the first V stage, untouched until planning is over: the sort
  // buffer of (block, coordinate) pairs, then the block id of each index entry.
  __device__ __forceinline__ int64_t* sort_buffer() const {
    return reinterpret_cast<int64_t*>(base + layout.v);
  }
  __device__ __forceinline__ int32_t* entry_blocks() const {
    return reinterpret_cast<int32_t*>(base + layout.v + kMaxCandidates * sizeof(int64_t));
  }
  __device__ __forceinline__ int32_t* page_row() const {
    return reinterpret_cast<int32_t*>(base + layout.warp_scratch);
  }
  __device__ __forceinline__ int32_t* slot_of_entry() const {
    return reinterpret_cast<int32_t*>(base + layout.warp_scratch) + kPageRowCapacity;
  }
};

#endif  // __CUDACC__

static_assert(kMaxCandidates * (sizeof(int64_t) + sizeof(int32_t)) <= kKvTileBytes,
              "planning's scratch must fit in one V stage");


}  // namespace flashmsa::sm90
