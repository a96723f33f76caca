// Planning by one warp, for launches whose tiles hold at most 128 candidates (tokens x topk:
// decode and multi-token prediction). It builds the same plan as plan_union (planning.cuh):
// the tile's key limits, the union of its tokens' selected blocks sorted ascending, and each
// union block's token mask. Everything stays in the warp's registers (lane l holds entries
// 4l .. 4l + 3), so there is no block barrier between the steps, and the consumer warpgroup
// loads Q meanwhile. Decode CTAs spent about 5 us in block-wide planning with the DRAM idle
// (docs/performance.md); this path cuts the chain to two dependent rounds of loads (the request
// scan together with the guessed tile's index entries and its request's page-table row, then
// the block scan) and a few hundred cycles of register work.
#pragma once

#include <stdint.h>

#include "common/visibility.h"
#include "sm90/kernel_traits.h"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/timeline.cuh"

namespace flashmsa::sm90 {

// Launch-uniform: whether this launch plans its tiles in one warp.
__device__ __forceinline__ bool plans_in_one_warp(const PrefillParams& p) {
  return p.tokens_per_tile * p.topk <= kWarpSortMax;
}

// A tile's index entries as warp 0 holds them: lane l has entries 4l .. 4l + 3 of the tile's
// tokens x topk list (entry e: token e / topk, position e % topk); -1 past the list.
struct WarpEntries {
  int32_t block[4];
};

__device__ __forceinline__ WarpEntries load_warp_entries(const PrefillParams& p,
                                                         int64_t first_row, int num_tokens,
                                                         int kv_head) {
  const int lane = threadIdx.x % 32;
  const int num_entries = num_tokens * p.topk;
  WarpEntries entries;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int e = 4 * lane + r;
    entries.block[r] = -1;
    if (e < num_entries) {
      const int64_t row = first_row + e / p.topk;
      entries.block[r] = p.q2k_indices[kv_head * p.idx_stride_head + row * p.idx_stride_token +
                                       (e % p.topk) * p.idx_stride_topk];
    }
  }
  return entries;
}

// Where a tile is when every request has uniform_rows query rows (decode batches): request
// tile / tiles_per_request. Warp 0 loads the guessed tile's entries in the same round of loads
// as the request scan (locate_tile) that finds the tile for certain; the entries are used only
// if the scan agrees, so a wrong guess (ragged requests) costs one more round, never a wrong
// result.
struct TileGuess {
  int32_t batch_index;  // -1: no guess
  int32_t first_row;
  int32_t num_tokens;
};

__device__ __forceinline__ TileGuess guess_tile(const PrefillParams& p, int64_t tile_index) {
  TileGuess guess{-1, 0, 0};
  if (p.uniform_rows <= 0) return guess;
  const int32_t tiles_per_request = (p.uniform_rows + p.tokens_per_tile - 1) / p.tokens_per_tile;
  if (tile_index >= p.batch_size * tiles_per_request) return guess;
  const int32_t tile = static_cast<int32_t>(tile_index);  // < B x tiles_per_request <= total_q
  const int32_t batch = tile / tiles_per_request;
  const int32_t first_token = (tile % tiles_per_request) * p.tokens_per_tile;
  guess.batch_index = batch;
  guess.first_row = batch * p.uniform_rows + first_token;  // <= total_q, which fits int32
  guess.num_tokens = min(p.tokens_per_tile, p.uniform_rows - first_token);
  return guess;
}

// The guessed request's page-table row, loaded in the same round by the threads that do not load
// index entries (all but warp 0), so that looking a block's page up is a shared-memory read, not
// a third dependent round of global loads. kPageRowLoadsPerThread loads per thread are held in
// registers across the request scan and stored after it; the row lives in the first V stage,
// untouched until planning is over. Blocks past the cached length are looked up in global
// memory.
constexpr int kPageRowLoadsPerThread = 8;

struct PageRowLoads {
  int32_t page[kPageRowLoadsPerThread];
};

__device__ __forceinline__ int cached_page_row_length(const PrefillParams& p,
                                                      const TileGuess& guess) {
  if (!p.is_paged || guess.batch_index < 0) return 0;
  const int64_t capacity = static_cast<int64_t>(blockDim.x - 32) * kPageRowLoadsPerThread;
  return static_cast<int>(min(p.max_pages, capacity));
}

__device__ __forceinline__ PageRowLoads load_page_row(const PrefillParams& p,
                                                      const TileGuess& guess, int length) {
  const int helper = threadIdx.x - 32, helpers = blockDim.x - 32;
  const int32_t* row = p.page_table + guess.batch_index * p.page_table_stride_batch;
  PageRowLoads loads;
#pragma unroll
  for (int k = 0; k < kPageRowLoadsPerThread; ++k) {
    const int i = helper + k * helpers;
    loads.page[k] = i < length ? row[i * p.page_table_stride_page] : -1;
  }
  return loads;
}

__device__ __forceinline__ void store_page_row(const Smem& smem, const PageRowLoads& loads,
                                               int length) {
  const int helper = threadIdx.x - 32, helpers = blockDim.x - 32;
#pragma unroll
  for (int k = 0; k < kPageRowLoadsPerThread; ++k) {
    const int i = helper + k * helpers;
    if (i < length) smem.page_row()[i] = loads.page[k];
  }
}

__device__ __forceinline__ bool guess_holds(const TileGuess& guess, const SmemHeader& header) {
  return guess.batch_index == header.batch_index && guess.first_row == header.tile_first_row &&
         guess.num_tokens == header.tile_num_tokens;
}

// Writes the distinct valid (block, coordinate) pairs of a sorted candidate list held by the
// warp to the union arrays, zeroes their token masks, and returns the union size (every lane).
__device__ __forceinline__ int warp_compact_union(const int64_t (&value)[4], const Smem& smem,
                                                  int mask_words) {
  const int lane = threadIdx.x % 32;
  const int64_t previous_lane_last = __shfl_up_sync(0xffffffffu, value[3], 1);
  bool first[4];
  int count = 0;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t before = r > 0 ? value[r - 1] : previous_lane_last;
    first[r] = value[r] != kInvalidCandidate && ((lane == 0 && r == 0) || value[r] != before);
    count += first[r];
  }
  int inclusive = count;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  const int union_size = __shfl_sync(0xffffffffu, inclusive, 31);
  int position = inclusive - count;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    if (!first[r]) continue;
    smem.union_blocks()[position] = static_cast<int32_t>(value[r] >> 32);
    smem.union_coords()[position] = static_cast<int32_t>(value[r] & 0xffffffff);
    ++position;
  }
#pragma unroll 1
  for (int i = lane; i < union_size * mask_words; i += 32) smem.token_mask(0)[i] = 0;
  return union_size;
}

// Warp 0 of a located tile (batch_index >= 0). `entries` are the guessed tile's; they are
// reloaded when the guess did not hold. Writes the key limits, the union and the token masks,
// and the union size to the header; the caller's block barrier publishes them.
__device__ inline void plan_tile_in_warp(const PrefillParams& p, const Smem& smem,
                                         WarpEntries entries, const TileGuess& guess,
                                         int kv_head) {
  SmemHeader& header = smem.header();
  const int lane = threadIdx.x % 32;
  const int topk = p.topk;
  const int num_tokens = header.tile_num_tokens;
  const int num_entries = num_tokens * topk;
  if (!guess_holds(guess, header)) {
    entries = load_warp_entries(p, header.tile_first_row, num_tokens, kv_head);
  }
  const int page_row_length =
      guess.batch_index == header.batch_index ? cached_page_row_length(p, guess) : 0;
  int32_t* first_negative = smem.token_first_negative();
  int32_t* limits = smem.token_key_limit();
#pragma unroll 1
  for (int t = lane; t < p.tokens_per_tile; t += 32) {
    first_negative[t] = topk;
    const int64_t limit = t < num_tokens ? key_limit(p.causal, header.tile_first_position + t,
                                                     header.request_seqlen_k)
                                         : 0;
    limits[t] = static_cast<int32_t>(clamp_i64(limit, 0, header.request_seqlen_k));
  }
  __syncwarp();
  FLASHMSA_MARK_BY(0, kMarkEntriesRead);
  // Rule 1: the first negative entry ends a token's list.
  int token[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int e = 4 * lane + r;
    token[r] = e / topk;
    if (e < num_entries && entries.block[r] < 0) atomicMin(&first_negative[token[r]], e % topk);
  }
  __syncwarp();
  FLASHMSA_MARK_BY(0, kMarkNegativesCut);
  // Rules 2 and 3: (block, TMA coordinate) pairs of the entries that select keys. Dropped
  // entries become -1.
  int64_t value[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int e = 4 * lane + r;
    const int32_t block = entries.block[r];
    value[r] = kInvalidCandidate;
    if (e < num_entries && e % topk < first_negative[token[r]] &&
        block_selects_keys(block, limits[token[r]], p.is_paged, p.max_pages)) {
      int64_t coord;
      if (!p.is_paged) {
        coord = header.request_first_key_row + static_cast<int64_t>(block) * kBlockSize;
      } else if (block < page_row_length) {
        const int64_t page = smem.page_row()[block];
        coord = page >= 0 && page < p.num_pages ? page : -1;
      } else {
        coord = page_of_block(p.page_table, p.page_table_stride_batch, p.page_table_stride_page,
                              header.batch_index, block, p.num_pages);
      }
      if (coord >= 0) value[r] = (static_cast<int64_t>(block) << 32) | static_cast<uint32_t>(coord);
    }
    if (value[r] == kInvalidCandidate) entries.block[r] = -1;
  }
  FLASHMSA_MARK_BY(0, kMarkCandidates);
  int padded = 1;
  while (padded < num_entries) padded *= 2;
  warp_bitonic_sort(value, padded);
  FLASHMSA_MARK_BY(0, kMarkSorted);
  const int union_size = warp_compact_union(value, smem, p.smem_layout.mask_words);
  __syncwarp();
  FLASHMSA_MARK_BY(0, kMarkCompacted);
  // Which tokens selected each union block (duplicates set the same bit once).
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int32_t block = entries.block[r];
    if (block < 0) continue;
    int lo = 0, hi = union_size - 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (smem.union_blocks()[mid] < block) lo = mid + 1; else hi = mid;
    }
    atomicOr(&smem.token_mask(lo)[token[r] / 32], 1u << (token[r] % 32));
  }
  if (lane == 0) header.union_size = union_size;
}

}  // namespace flashmsa::sm90
