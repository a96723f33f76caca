// Planning by one warp, for tiles of at most 128 candidates (tokens x topk). It builds what
// plan_union (planning.cuh) builds: the tile's key limits, the union of its tokens' selected
// blocks and each union block's token mask. Decode launches (the one-consumer kernel:
// plan_tile_in_warp) keep the union in entry order (first occurrences, token-major): flat and
// paged calls still visit the same blocks in the same order (bitwise equal results), and the
// first block of a CTA's slice is known before planning ends. The two-consumer kernel (prefill
// tiles, multi-token prediction: plan_tile_sorted_in_warp) sorts it, as plan_union does. Warp 0
// holds the entries in registers (WarpEntries); there is no block barrier between the steps,
// and the consumers load Q meanwhile.
//
// Two rounds of loads instead of three: the guessed tile's index entries and its request's
// page-table row go out with the request scan (locate_tile), and the producer issues the loads
// of its slice's first block speculatively, as soon as the scan is done (speculate_first_block),
// on the guess that every entry is valid and distinct. Decode CTAs spent about 6 us planning
// with the DRAM idle; with the speculation the first K and V are on their
// way after about 2.5 us, and a wrong guess costs one wasted block load, never a wrong result.
#pragma once

#include <stdint.h>

#include "common/visibility.h"
#include "sm90/kernel_traits.h"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/producer.cuh"
#include "sm90/ptx.cuh"
#include "sm90/timeline.cuh"

namespace flashmsa::sm90 {

// Launch-uniform: whether this launch plans its tiles in one warp (params.h).
__device__ __forceinline__ bool plans_in_one_warp(const AttentionParams& p) {
  return p.warp_planning != 0;
}

// Launch-uniform: whether that plan is sorted (the two-consumer kernel: plan_tile_sorted_in_warp).
__device__ __forceinline__ bool sorts_in_one_warp(const AttentionParams& p) {
  return p.warp_planning == kWarpPlanSorted || p.warp_planning == kWarpPlanBitmap;
}

// A tile's index entries as warp 0 holds them, round-major: lane l has entries l, 32 + l,
// 64 + l and 96 + l of the tile's tokens x topk list (entry e: token e / topk, position
// e % topk); -1 past the list. A one-token decode tile (topk <= 32) is then one register per
// lane, and each planning rule is a few warp-wide instructions (ballot, match) on it.
constexpr int kEntryRounds = kWarpPlanMaxEntries / 32;
static_assert(kEntryRounds == 4, "the initialisers and the register select below assume 4 rounds");

struct WarpEntries {
  int32_t block[kEntryRounds];
};

__device__ __forceinline__ WarpEntries load_warp_entries(const AttentionParams& p,
                                                         int64_t first_row, int num_tokens,
                                                         int kv_head) {
  const int lane = threadIdx.x % 32;
  const int num_entries = num_tokens * p.topk;
  WarpEntries entries;
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    const int e = 32 * r + lane;
    entries.block[r] = -1;
    if (e < num_entries) {
      const EntryPlace place = entry_place(p, e);
      const int64_t row = first_row + place.token;
      entries.block[r] = p.q2k_indices[kv_head * p.idx_stride_head + row * p.idx_stride_token +
                                       place.position * p.idx_stride_topk];
    }
  }
  return entries;
}

// Where a tile is when every request has uniform_rows query rows (decode batches): request
// tile / tiles_per_request. The guessed tile's entries and page-table row are loaded in the same
// round as the request scan (locate_tile) that finds the tile for certain; they are used only if
// the scan agrees, so ragged requests cost one more round, never a wrong result.
struct TileGuess {
  int32_t batch_index;  // -1: no guess
  int32_t first_row;
  int32_t num_tokens;
};

__device__ __forceinline__ TileGuess guess_tile(const AttentionParams& p, int64_t tile_index) {
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

__device__ __forceinline__ bool guess_holds(const TileGuess& guess, const SmemHeader& header) {
  return guess.batch_index == header.batch_index && guess.first_row == header.tile_first_row &&
         guess.num_tokens == header.tile_num_tokens;
}

// The guessed request's page-table row, loaded by the threads that do not load index entries
// (warps 1 and up): kPageRowLoadsPerThread loads per thread, held in registers across the
// request scan and stored after it. Blocks past the cached length are looked up in global
// memory.
struct PageRowLoads {
  int32_t page[kPageRowLoadsPerThread];
};

__device__ __forceinline__ int cached_page_row_length(const AttentionParams& p,
                                                      const TileGuess& guess) {
  if (!p.is_paged || guess.batch_index < 0) return 0;
  const int64_t capacity = static_cast<int64_t>(blockDim.x - 32) * kPageRowLoadsPerThread;
  return static_cast<int>(min(p.max_pages, capacity));
}

// The threads past warp 0 (helper h = threadIdx.x - 32 of kHelpers, or of blockDim.x - 32 when
// kHelpers is 0) load entries h, h + helpers, ... of request batch_index's page-table row, up to
// `length`; store_page_row stores them.
template <int kHelpers = 0>
__device__ __forceinline__ int page_row_helpers() {
  return kHelpers > 0 ? kHelpers : static_cast<int>(blockDim.x) - 32;
}

template <int kHelpers = 0>
__device__ __forceinline__ PageRowLoads load_page_row(const AttentionParams& p, int64_t batch_index,
                                                      int length) {
  const int helper = threadIdx.x - 32, helpers = page_row_helpers<kHelpers>();
  const int32_t* row = p.page_table + batch_index * p.page_table_stride_batch;
  PageRowLoads loads;
#pragma unroll
  for (int k = 0; k < kPageRowLoadsPerThread; ++k) {
    const int i = helper + k * helpers;
    loads.page[k] = i < length ? row[i * p.page_table_stride_page] : -1;
  }
  return loads;
}

// row_of(): where the row goes in shared memory, formed at each store as the two kernels'
// own copies of this loop formed it (their SASS is unchanged by the sharing).
template <int kHelpers = 0, typename RowOf>
__device__ __forceinline__ void store_page_row(RowOf row_of, const PageRowLoads& loads,
                                               int length) {
  const int helper = threadIdx.x - 32, helpers = page_row_helpers<kHelpers>();
#pragma unroll
  for (int k = 0; k < kPageRowLoadsPerThread; ++k) {
    const int i = helper + k * helpers;
    if (i < length) row_of()[i] = loads.page[k];
  }
}

// Entry `block` of a page-table row cached in shared memory, checked as page_of_block checks
// the table's (-1: not a page).
__device__ __forceinline__ int64_t cached_page(const int32_t* row, int32_t block,
                                               int64_t num_pages) {
  const int64_t page = row[block];
  return page >= 0 && page < num_pages ? page : -1;
}

// The TMA coordinate of a block that passed block_selects_keys for the located tile's request:
// flat row of its first key, or its page (-1 if the table entry is not a page).
__device__ __forceinline__ int64_t block_coordinate(const AttentionParams& p, const Smem& smem,
                                                    const SmemHeader& header, int32_t block,
                                                    int page_row_length) {
  if (!p.is_paged) return header.request_first_key_row + static_cast<int64_t>(block) * kBlockSize;
  if (block < page_row_length) return cached_page(smem.page_row(), block, p.num_pages);
  return page_of_block(p.page_table, p.page_table_stride_batch, p.page_table_stride_page,
                       header.batch_index, block, p.num_pages);
}

// Warp 0, right after the request scan: if every entry of the (correctly guessed) tile is a
// valid block, the union is probably the entries themselves, in order, so this CTA's slice
// starts with entry num_entries * split / num_splits. Lane 0 (the producer) issues that block's
// K and V into stage 0 (issue_speculative_load); produce() checks the guess against the plan.
__device__ inline SpeculativeLoad speculate_first_block(const AttentionParams& p, const Smem& smem,
                                                    const WarpEntries& entries,
                                                    const TileGuess& guess, int kv_head,
                                                    int split, int page_row_length) {
  const SmemHeader& header = smem.header();
  const int lane = threadIdx.x % 32;
  const int num_entries = header.tile_num_tokens * p.topk;
  const int first = num_entries * split / p.num_splits;
  bool usable = p.speculate_first_block && guess_holds(guess, header) &&
                first < num_entries * (split + 1) / p.num_splits;
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    usable &= __all_sync(0xffffffffu, 32 * r + lane >= num_entries || entries.block[r] >= 0);
  }
  // entries.block[first / 32] without a dynamically indexed register array (local memory).
  const int r = (first / 32) % kEntryRounds;
  const int32_t mine = r == 0 ? entries.block[0]
                       : r == 1 ? entries.block[1]
                       : r == 2 ? entries.block[2]
                                : entries.block[3];
  const int32_t block = __shfl_sync(0xffffffffu, mine, first % 32);
  const SpeculativeLoad none{-1, -1};
  if (!usable || lane != 0) return none;
  const int token = entry_place(p, first).token;
  const int64_t limit = tile_token_key_limit(p, header, token);
  if (!block_selects_keys(block, limit, p.is_paged, p.max_pages)) return none;
  const int64_t coord = block_coordinate(p, smem, header, block, page_row_length);
  if (coord < 0) return none;
  const SpeculativeLoad load{block, static_cast<int32_t>(coord)};
  issue_speculative_load(p, smem, load, kv_head);
  return load;
}

// The three rules of contract section 4 for one token whose entries sit one per lane (lane l:
// entry l; -1 past topk), each a warp-wide instruction or two on the one register:
//   rule 1: the first negative entry ends the list (`entries`: where it ends otherwise, topk or
//           the causal entry limit's count);
//   rule 2: an entry before it survives if its block selects keys below `limit` and
//           coordinate_of(block) (its TMA coordinate: flat row or page) is not -1;
//   rule 3: the union holds each surviving block's first occurrence, in entry order, written to
//           union_blocks and union_coords (compacted by popc over a ballot).
// Shared by prefill_kernel's one-token tiles and the one-token decode kernel, so that both keep
// the same union in the same order.
struct OneTokenUnion {
  int slot;  // this lane's union slot, -1 if its entry is not a first occurrence
  int size;
};

template <typename CoordinateOf>
__device__ __forceinline__ OneTokenUnion plan_one_token_union(const AttentionParams& p,
                                                              const Smem& smem, int32_t entry,
                                                              int64_t limit, int32_t entries,
                                                              CoordinateOf coordinate_of) {
  const int lane = threadIdx.x % 32;
  const uint32_t negatives = __ballot_sync(0xffffffffu, lane < entries && entry < 0);
  const int first_negative = negatives != 0 ? __ffs(negatives) - 1 : entries;
  int32_t coord = -1;
  if (lane < first_negative && block_selects_keys(entry, limit, p.is_paged, p.max_pages)) {
    coord = static_cast<int32_t>(coordinate_of(entry));
  }
  const int32_t block = coord >= 0 ? entry : -1;
  const uint32_t same = __match_any_sync(0xffffffffu, block);
  const bool is_first = block >= 0 && __ffs(same) - 1 == lane;
  const uint32_t firsts = __ballot_sync(0xffffffffu, is_first);
  OneTokenUnion result{-1, __popc(firsts)};
  if (is_first) {
    result.slot = __popc(firsts & ((1u << lane) - 1));
    smem.union_blocks()[result.slot] = block;
    smem.union_coords()[result.slot] = coord;
  }
  return result;
}

// The plan of a one-token tile whose topk fits one round (lane l holds entry l): the three
// rules and the compaction of plan_tile_in_warp, each a warp-wide instruction or two on the one
// register, with no shared-memory atomics, loops or warp barriers between them. Every one-token
// CTA runs this once, cold, while the other CTAs' speculative loads fill the memory system, so
// its length is the start's. Same union, same order: first occurrences of
// the valid entries, in entry order.
__device__ inline void plan_one_token_in_warp(const AttentionParams& p, const Smem& smem,
                                              int32_t entry, int page_row_length) {
  SmemHeader& header = smem.header();
  const int lane = threadIdx.x % 32;
  const int64_t limit = tile_token_key_limit(p, header, 0);
  const OneTokenUnion plan = plan_one_token_union(p, smem, entry, limit,
                                                  tile_token_entries(p, header, 0),
                                                  [&](int32_t block) {
    return block_coordinate(p, smem, header, block, page_row_length);
  });
  if (plan.slot >= 0) {
    uint32_t* mask = smem.token_mask(plan.slot);
    mask[0] = 1u;  // the tile's one token chose it
    for (int w = 1; w < p.smem_layout.mask_words; ++w) mask[w] = 0u;
  }
  int32_t* limits = smem.token_key_limit();
  for (int t = lane; t < p.tokens_per_tile; t += 32) {
    limits[t] = t == 0 ? static_cast<int32_t>(limit) : 0;
  }
  if (lane == 0) header.union_size = plan.size;
}

// The located tile's entries: the guessed ones when the guess held, else loaded now (and the
// cached page-table row is then another request's).
__device__ __forceinline__ void take_located_entries(const AttentionParams& p,
                                                     const SmemHeader& header,
                                                     const TileGuess& guess, int kv_head,
                                                     WarpEntries& entries, int& page_row_length) {
  if (!guess_holds(guess, header)) {
    entries = load_warp_entries(p, header.tile_first_row, header.tile_num_tokens, kv_head);
    page_row_length = 0;
  }
}

// Before the rules: each tile token's key limit, and its first negative entry at the end of
// the entries it may read (tile_token_entries; rule 1 lowers it).
__device__ __forceinline__ void start_token_rules(const AttentionParams& p, const Smem& smem) {
  const SmemHeader& header = smem.header();
  int32_t* first_negative = smem.token_first_negative();
  int32_t* limits = smem.token_key_limit();
#pragma unroll 1
  for (int t = threadIdx.x % 32; t < p.tokens_per_tile; t += 32) {
    first_negative[t] = tile_token_entries(p, header, t);
    limits[t] = static_cast<int32_t>(tile_token_key_limit(p, header, t));
  }
}

// Rules 1 and 2 of contract section 4 on the entries warp 0 holds, rounds [0, rounds) (key
// limits and first negatives set up by start_token_rules): token[r] is the token of entry
// 32 r + lane, coord[r] its block's TMA coordinate, or -1 when the entry does not count (past
// the list or its token's first negative, selecting no key, or its page is not a page). Every
// loop over the rounds stops at the tile's last one: the code of the rounds a one-token tile
// does not have is then never fetched, which matters because each CTA runs planning once, with
// cold instruction caches, while the memory system is busy with the other CTAs' loads.
__device__ __forceinline__ void apply_entry_rules(const AttentionParams& p, const Smem& smem,
                                                  const WarpEntries& entries, int rounds,
                                                  int page_row_length,
                                                  int (&token)[kEntryRounds],
                                                  int32_t (&coord)[kEntryRounds]) {
  const SmemHeader& header = smem.header();
  const int lane = threadIdx.x % 32;
  const int topk = p.topk;
  const int num_entries = header.tile_num_tokens * topk;
  int32_t* first_negative = smem.token_first_negative();
  const int32_t* limits = smem.token_key_limit();
  int position[kEntryRounds];  // entry 32 r + lane's place in its token's list
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    token[r] = 0;
    position[r] = 0;
    coord[r] = -1;
  }
  // Rule 1: the first negative entry ends a token's list.
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    if (r >= rounds) break;
    const int e = 32 * r + lane;
    const EntryPlace place = entry_place(p, e);
    token[r] = place.token;
    position[r] = place.position;
    if (e < num_entries && entries.block[r] < 0) {
      atomicMin(&first_negative[token[r]], position[r]);
    }
  }
  __syncwarp();
  FLASHMSA_MARK_BY(0, kMarkNegativesCut);
  // Rule 2: an entry before it counts if its block selects keys and has a coordinate.
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    if (r >= rounds) break;
    const int e = 32 * r + lane;
    const int32_t block = entries.block[r];
    if (e < num_entries && position[r] < first_negative[token[r]] &&
        block_selects_keys(block, limits[token[r]], p.is_paged, p.max_pages)) {
      coord[r] = static_cast<int32_t>(block_coordinate(p, smem, header, block, page_row_length));
    }
  }
}

// Warp 0 of a located tile (batch_index >= 0). `entries` are the guessed tile's; they are
// reloaded when the guess did not hold. Writes the key limits, the union, its token masks and
// the union size (header); the caller's block barrier publishes them.
__device__ inline void plan_tile_in_warp(const AttentionParams& p, const Smem& smem,
                                         WarpEntries entries, const TileGuess& guess,
                                         int kv_head, int page_row_length) {
  SmemHeader& header = smem.header();
  const int lane = threadIdx.x % 32;
  const int topk = p.topk;
  const int num_tokens = header.tile_num_tokens;
  const int num_entries = num_tokens * topk;
  take_located_entries(p, header, guess, kv_head, entries, page_row_length);
  if (num_tokens == 1 && num_entries <= 32) {
    plan_one_token_in_warp(p, smem, entries.block[0], page_row_length);
    return;
  }
  start_token_rules(p, smem);
  __syncwarp();
  FLASHMSA_MARK_BY(0, kMarkEntriesRead);
  const int rounds = (num_entries + 31) / 32;  // warp-uniform
  const uint32_t lanes_below = (1u << lane) - 1;
  int token[kEntryRounds];
  int32_t coord[kEntryRounds];
  apply_entry_rules(p, smem, entries, rounds, page_row_length, token, coord);
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    if (r >= rounds) break;
    if (coord[r] < 0) entries.block[r] = -1;
  }
  FLASHMSA_MARK_BY(0, kMarkCandidates);
  // Rule 3: an entry is the union's if no earlier entry holds the same block; first_entry is
  // the earliest entry holding it. Earlier rounds are walked lane by lane (only tiles of more
  // than 32 entries have them), then one match finds the earliest lane of the same round.
  int first_entry[kEntryRounds] = {-1, -1, -1, -1};
#pragma unroll
  for (int earlier = 0; earlier < kEntryRounds - 1; ++earlier) {
    if (earlier + 1 >= rounds) break;
#pragma unroll 1
    for (int source = 0; source < 32; ++source) {
      const int32_t other = __shfl_sync(0xffffffffu, entries.block[earlier], source);
#pragma unroll
      for (int r = earlier + 1; r < kEntryRounds; ++r) {
        if (first_entry[r] < 0 && other >= 0 && other == entries.block[r]) {
          first_entry[r] = 32 * earlier + source;
        }
      }
    }
  }
  bool is_first[kEntryRounds] = {};
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    if (r >= rounds) break;
    const uint32_t same = __match_any_sync(0xffffffffu, entries.block[r]);
    if (first_entry[r] < 0) first_entry[r] = 32 * r + __ffs(same) - 1;
    is_first[r] = entries.block[r] >= 0 && first_entry[r] == 32 * r + lane;
  }
  FLASHMSA_MARK_BY(0, kMarkSorted);
  // Compaction: union slot = number of first occurrences before the entry (ballots).
  int union_size = 0;
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    if (r >= rounds) break;
    const uint32_t firsts = __ballot_sync(0xffffffffu, is_first[r]);
    if (is_first[r]) {
      const int slot = union_size + __popc(firsts & lanes_below);
      smem.union_blocks()[slot] = entries.block[r];
      smem.union_coords()[slot] = coord[r];
      smem.slot_of_entry()[32 * r + lane] = slot;
    }
    union_size += __popc(firsts);
  }
  const int mask_words = p.smem_layout.mask_words;
#pragma unroll 1
  for (int i = lane; i < union_size * mask_words; i += 32) smem.token_mask(0)[i] = 0;
  __syncwarp();
  FLASHMSA_MARK_BY(0, kMarkCompacted);
  // Which tokens selected each union block (duplicates set the same bit once).
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    if (r >= rounds) break;
    if (entries.block[r] < 0) continue;
    const int u = smem.slot_of_entry()[first_entry[r]];
    atomicOr(&smem.token_mask(u)[token[r] / 32], 1u << (token[r] % 32));
  }
  if (lane == 0) header.union_size = union_size;
}

// Warp 1, right after the request scan, for the sorted plan (plan_tile_sorted_in_warp runs in
// warp 0 meanwhile, so the cold lookup and TMA issue, about 2.4 us at multi-token prediction's
// start, are off the plan's chain): if the guessed tile is the located one, every entry is a
// block and the launch has one split, the union probably starts with the lowest entry. Lane 0
// issues that block's K and V into stage 0, as speculate_first_block does for entry order, and
// leaves the guess in the header for the producer; produce() checks it against the plan, so a
// wrong one costs a wasted load, never a wrong result. The warp arrives at
// kSpeculationBarrier once its page-table lookup is done: warp 0 reuses the page-table row for
// the union bitmap only after that.
constexpr uint32_t kSpeculationBarrier = 4;  // named; ids 1-3 are the consumers'

__device__ inline void speculate_lowest_block(const AttentionParams& p, const Smem& smem,
                                              const WarpEntries& entries, const TileGuess& guess,
                                              int kv_head, int page_row_length) {
  SmemHeader& header = smem.header();
  const int lane = threadIdx.x % 32;
  const int num_entries = header.tile_num_tokens * p.topk;
  bool usable = p.speculate_first_block && p.num_splits == 1 && guess_holds(guess, header);
  int32_t lowest = INT32_MAX;
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    const bool exists = 32 * r + lane < num_entries;
    usable &= __all_sync(0xffffffffu, !exists || entries.block[r] >= 0);
    if (exists) lowest = min(lowest, entries.block[r]);
  }
  lowest = __reduce_min_sync(0xffffffffu, lowest);
  SpeculativeLoad load{-1, -1};
  if (usable && lane == 0) {
    // Causal limits grow with the token, so the tile's last token sees every block any sees.
    const int64_t limit = tile_token_key_limit(p, header, header.tile_num_tokens - 1);
    if (block_selects_keys(lowest, limit, p.is_paged, p.max_pages)) {
      const int64_t coord = block_coordinate(p, smem, header, lowest, page_row_length);
      if (coord >= 0) load = SpeculativeLoad{lowest, static_cast<int32_t>(coord)};
    }
  }
  named_barrier_arrive(kSpeculationBarrier, 64);  // done with the page-table row
  if (lane != 0) return;
  if (load.block >= 0) issue_speculative_load(p, smem, load, kv_head);
  header.speculative_block = load.block;
  header.speculative_coord = load.coord;
  FLASHMSA_MARK_BY(32, kMarkSpeculated);
}

// The ascending union of the entries that count (coord >= 0) through a bitmap of the request's
// blocks instead of a sorting network: each entry sets its block's bit, a warp scan counts the
// bits of the words below each word, and an entry's union slot is that count plus the bits
// below its own in its word. Same union, same order and same masks as the sort (duplicates of a
// block store the same block and coordinate to the same slot), in a few shared-memory
// operations per entry instead of the network's 28 dependent exchange steps. The bitmap and
// the counts live in the cached page-table row, which rule 2 was the last to read. `words`
// (ceil(blocks / 32) for the request's blocks) must be at most kUnionBitmapMaxWords.
__device__ __forceinline__ int ascending_union_by_bitmap(const Smem& smem,
                                                         const WarpEntries& entries,
                                                         const int (&token)[kEntryRounds],
                                                         const int32_t (&coord)[kEntryRounds],
                                                         int words) {
  const int lane = threadIdx.x % 32;
  uint32_t* bitmap = reinterpret_cast<uint32_t*>(smem.page_row());
  int32_t* blocks_below = smem.page_row() + words;  // union blocks in the words below word w
  __syncwarp();  // every lane's rule-2 reads of the page row are done
#pragma unroll 1
  for (int w = lane; w < words; w += 32) bitmap[w] = 0u;
  __syncwarp();
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    if (coord[r] >= 0) atomicOr(&bitmap[entries.block[r] / 32], 1u << (entries.block[r] % 32));
  }
  __syncwarp();
  int union_size = 0;
#pragma unroll 1
  for (int first = 0; first < words; first += 32) {  // warp-uniform: words is the tile's
    const int w = first + lane;
    const int count = w < words ? __popc(bitmap[w]) : 0;
    int inclusive = count;
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += other;
    }
    if (w < words) blocks_below[w] = union_size + inclusive - count;
    union_size += __shfl_sync(0xffffffffu, inclusive, 31);
  }
  __syncwarp();
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    if (coord[r] < 0) continue;
    const int32_t block = entries.block[r];
    const uint32_t below = bitmap[block / 32] & ((1u << (block % 32)) - 1u);
    const int slot = blocks_below[block / 32] + __popc(below);
    smem.union_blocks()[slot] = block;
    smem.union_coords()[slot] = coord[r];
    atomicOr(&smem.token_mask(slot)[token[r] / 32], 1u << (token[r] % 32));
  }
  return union_size;
}

// The two-consumer kernel's plan in one warp (prefill tiles and multi-token prediction, at most
// 128 candidates): the union of plan_union (planning.cuh), ascending by block, built in warp 0's
// registers. Each CTA runs it once, cold, so code length sets its time (MTP planned at 11 us
// from entry, now 6), but the consumers load Q meanwhile and warp 1
// the tile's lowest block (speculate_lowest_block): prefill +1%, MTP +0.5% (warp 1
// rather than warp 0, which plans). The steps:
//   the rules of contract section 4 as in plan_tile_in_warp (key limits, first negatives,
//   coordinates);
//   one bitonic sort of (block << 32 | entry) keys, invalid entries last, so that duplicates
//   become neighbours and the union comes out ascending, as concurrent tiles of one head want;
//   compaction by a warp scan of the first occurrences, and each entry's token bit set in its
//   block's mask.
// Same union, same order and same masks as plan_union, so results are bitwise equal to it.
__device__ inline void plan_tile_sorted_in_warp(const AttentionParams& p, const Smem& smem,
                                                WarpEntries entries, const TileGuess& guess,
                                                int kv_head, int page_row_length) {
  SmemHeader& header = smem.header();
  const int lane = threadIdx.x % 32;
  const int topk = p.topk;
  const int num_tokens = header.tile_num_tokens;
  const int num_entries = num_tokens * topk;
  take_located_entries(p, header, guess, kv_head, entries, page_row_length);
  int32_t* coord_of_entry = smem.slot_of_entry();
  const int mask_words = p.smem_layout.mask_words;
  start_token_rules(p, smem);
#pragma unroll 1
  for (int i = lane; i < num_entries * mask_words; i += 32) smem.token_mask(0)[i] = 0;
  __syncwarp();
  FLASHMSA_MARK_BY(0, kMarkEntriesRead);
  int token[kEntryRounds];
  int32_t coord[kEntryRounds];
  apply_entry_rules(p, smem, entries, kEntryRounds, page_row_length, token, coord);
  // Warp 1's lookup in the page-table row is done (waited for on both paths below: warp 1
  // always arrives, and only the bitmap overwrites the row).
  named_barrier_sync(kSpeculationBarrier, 64);
  // Every block that counts is below the request's key length (rule 2). The launch sends calls
  // whose requests may be longer than the bitmap holds to the network (warp_plan_kind); the
  // check below is the kernel's own, on a count taken in 64 bits for any length.
  const int64_t words =
      (int64_t{header.request_seqlen_k} + 32 * kBlockSize - 1) / (32 * kBlockSize);
  if (p.warp_planning == kWarpPlanBitmap && words <= kUnionBitmapMaxWords) {
    FLASHMSA_MARK_BY(0, kMarkCandidates);
    const int union_size =
        ascending_union_by_bitmap(smem, entries, token, coord, static_cast<int>(words));
    FLASHMSA_MARK_BY(0, kMarkSorted);
    FLASHMSA_MARK_BY(0, kMarkCompacted);
    if (lane == 0) header.union_size = union_size;
    return;
  }
  // An entry that counts gets a sort key with its block above its index, so the sort also
  // groups each block's entries.
  int64_t key[kEntryRounds];
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    const int e = 32 * r + lane;
    key[r] = kInvalidCandidate;
    if (coord[r] >= 0) {
      coord_of_entry[e] = coord[r];
      key[r] = (static_cast<int64_t>(entries.block[r]) << 32) | e;
    }
  }
  FLASHMSA_MARK_BY(0, kMarkCandidates);
  warp_bitonic_sort(key, kWarpPlanMaxEntries);  // lane l now holds sorted keys 4l .. 4l + 3
  __syncwarp();  // coord_of_entry is read across lanes below
  FLASHMSA_MARK_BY(0, kMarkSorted);
  // Compaction: a key opens a union slot if it is valid and its block differs from the key
  // before it; its slot is the number of openings before it. Every valid key's token then sets
  // its bit in the mask of its block's slot.
  const int64_t before_first =
      __shfl_up_sync(0xffffffffu, key[kEntryRounds - 1], 1);  // lane l - 1's last key
  bool opens[kEntryRounds];
  int opened = 0;
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    const int64_t previous = r > 0 ? key[r - 1] : (lane > 0 ? before_first : kInvalidCandidate);
    opens[r] = key[r] != kInvalidCandidate &&
               (previous == kInvalidCandidate || (key[r] >> 32) != (previous >> 32));
    opened += opens[r];
  }
  int inclusive = opened;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  int slot = inclusive - opened - 1;  // the slot of the block before this lane's first key
#pragma unroll
  for (int r = 0; r < kEntryRounds; ++r) {
    if (key[r] == kInvalidCandidate) continue;
    slot += opens[r];
    const int e = static_cast<int>(key[r] & 0xffffffff);
    if (opens[r]) {
      smem.union_blocks()[slot] = static_cast<int32_t>(key[r] >> 32);
      smem.union_coords()[slot] = coord_of_entry[e];
    }
    const int t = entry_place(p, e).token;
    atomicOr(&smem.token_mask(slot)[t / 32], 1u << (t % 32));
  }
  FLASHMSA_MARK_BY(0, kMarkCompacted);
  if (lane == 31) header.union_size = inclusive;
}

}  // namespace flashmsa::sm90
