// Tile sizes, thread roles and the shared-memory plan of the Hopper prefill kernel.
#pragma once

#include <stdint.h>

namespace flashmsa::sm90 {

constexpr int kHeadDim = 128;
constexpr int kBlockKeys = 128;        // keys per selected block: one TMA box pair per operand
constexpr int kRowsPerWarpgroup = 64;  // wgmma M
constexpr int kNumConsumerWarpgroups = 2;
constexpr int kNumThreads = 128 * (1 + kNumConsumerWarpgroups);  // warpgroup 0 produces
// K and V have separate rings of stages: K of a block is released as soon as S = Q K^T is done,
// V only after P V, which the software pipeline issues one step later. 2 x (32 + 32) KiB is all
// the shared memory left beside Q and the planning buffers.
constexpr int kNumStages = 2;
// Candidates (tokens x topk) one tile plans over; tiles are sized so that they never exceed it.
constexpr int kMaxCandidates = 2048;
constexpr int kMaxTileTokens = 128;
constexpr int kMaskWords = kMaxTileTokens / 32;
// A panel is the 128-byte-wide column slice (64 bf16/fp16 values) that one 128B-swizzled TMA
// box or wgmma descriptor covers; head_dim 128 is two panels.
constexpr int kPanelElems = 64;
constexpr int kQPanelBytes = kRowsPerWarpgroup * 128;  // 8 KiB
constexpr int kKvPanelBytes = kBlockKeys * 128;        // 16 KiB
constexpr int kKvTileBytes = 2 * kKvPanelBytes;        // one operand of one block: 32 KiB
constexpr uint32_t kStageTxBytes = kKvTileBytes;       // one operand of one block

// Register budgets (setmaxnreg): the producer warpgroup only issues TMA, the consumers hold the
// 64x128 fp32 S and O accumulators (64 + 64 registers per thread) plus P in 16-bit.
// 24 + 2 * 240 = 504 <= 512 registers per 384-thread CTA slot of 65536.
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;

// Shared memory. 1024-byte alignment for every 128B-swizzled operand (TMA and wgmma require
// the swizzle pattern to start on a 1024-byte boundary).
struct SharedStorage {
  alignas(1024) uint8_t q[kNumConsumerWarpgroups][2 * kQPanelBytes];
  alignas(1024) uint8_t k[kNumStages][kKvTileBytes];
  // The planning sort buffer lives in V's stages: they are untouched until planning is over.
  alignas(1024) uint8_t v[kNumStages][kKvTileBytes];
  alignas(8) uint64_t k_full[kNumStages];   // TMA bytes of K landed
  alignas(8) uint64_t k_empty[kNumStages];  // all consumer threads done with K of the stage
  alignas(8) uint64_t v_full[kNumStages];
  alignas(8) uint64_t v_empty[kNumStages];
  int32_t union_blocks[kMaxCandidates];  // ascending distinct block ids the tile reads
  int32_t union_coords[kMaxCandidates];  // TMA coordinate: flat token row, or page id
  uint32_t token_masks[kMaxCandidates][kMaskWords];  // bit t: tile token t selected the block
  int32_t token_key_limit[kMaxTileTokens];  // keys [0, limit) are visible to the token
  int32_t token_first_negative[kMaxTileTokens];
  int32_t batch_index;
  int32_t tile_first_row;
  int32_t tile_num_tokens;
  int32_t request_seqlen_k;
  int32_t request_first_key_row;  // flat path: row of k/v holding the request's key 0
};

static_assert(kMaxCandidates * sizeof(int32_t) <= sizeof(SharedStorage::v),
              "the planning sort buffer must fit in the V stages");

}  // namespace flashmsa::sm90
