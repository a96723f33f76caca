// Per-tile planning, before the warp roles split:
//   1. find the request and first query row of this CTA's tile (grid sized from shapes only;
//      every thread takes part);
//   2. for each token of the tile, its visible key limit (causal position, sequence length);
//   3. the union of the tokens' selected blocks (contract section 4 set semantics), sorted
//      ascending so that flat and paged calls visit keys in the same order (bitwise equality);
//   4. for each union block, the bit mask of tile tokens that selected it.
// Steps 2-4 run here on every thread (plan_union) when a tile has more than 128 candidates, and
// in one warp's registers otherwise (warp_planning.cuh: decode in entry order, the two-consumer
// kernel sorted, with the same union as plan_union).
// Every id read from device memory goes through visibility.h's rules: nothing it says is
// dereferenced before being checked, so garbage indices cannot read out of bounds.
#pragma once

#include <limits.h>
#include <stdint.h>

#include "common/visibility.h"
#include "sm90/kernel_traits.h"
#include "sm90/params.h"
#include "sm90/timeline.cuh"

namespace flashmsa::sm90 {

// What a CTA works on, from its linear block index (params.h: tiles_outer).
struct CtaWork {
  int64_t tile;
  int32_t kv_head;
  int32_t head_chunk;
  int32_t split;
};

// The launch keeps the grid below 2^31 CTAs, so the fast divisors (common/fast_divisor.h) apply.
__device__ __forceinline__ CtaWork cta_work(const AttentionParams& p) {
  const uint32_t rest = quotient(blockIdx.x, p.splits_divisor);
  const uint32_t outer = quotient(rest, p.tiles_outer ? p.columns_divisor : p.tiles_divisor);
  const uint32_t inner = rest - outer * (p.tiles_outer ? p.columns_divisor.divisor
                                                       : p.tiles_divisor.divisor);
  const uint32_t column = p.tiles_outer ? inner : outer;
  const uint32_t kv_head = quotient(column, p.head_chunks_divisor);
  CtaWork work;
  work.split = static_cast<int32_t>(blockIdx.x - rest * p.splits_divisor.divisor);
  work.tile = p.tiles_outer ? outer : inner;
  work.kv_head = static_cast<int32_t>(kv_head);
  work.head_chunk = static_cast<int32_t>(column - kv_head * p.head_chunks_divisor.divisor);
  return work;
}

struct TilePlan {
  int32_t batch_index;      // -1: this CTA's tile index is past the last tile
  int32_t first_row;        // global query row of tile token 0
  int32_t num_tokens;       // tokens of the tile that exist
  int32_t seqlen_k;
  int32_t union_size;
  // This CTA's share of the union, [slice_begin, slice_end): all of it without a KV split;
  // with one (decode), split s of S takes union entries [U * s / S, U * (s + 1) / S).
  int32_t slice_begin;
  int32_t slice_end;
  int32_t split;
};

// The plan of a located tile whose union is in shared memory (union_size * splits < 2^31).
__device__ __forceinline__ TilePlan tile_plan(const SmemHeader& header, int32_t union_size,
                                              int32_t split, FastDivisor splits) {
  const uint32_t size = static_cast<uint32_t>(union_size), rank = static_cast<uint32_t>(split);
  return TilePlan{header.batch_index,
                  header.tile_first_row,
                  header.tile_num_tokens,
                  header.request_seqlen_k,
                  union_size,
                  static_cast<int32_t>(quotient(size * rank, splits)),
                  static_cast<int32_t>(quotient(size * (rank + 1), splits)),
                  split};
}

// A tile that no split shares.
__device__ __forceinline__ FastDivisor one_split() { return FastDivisor{1, 1, 0}; }

// Step i of a CTA's slice uses stage i % num_stages of the K and V rings, in phase
// (i / num_stages) & 1 of that stage's barriers (the producer waits for the opposite phase of
// the empty barriers). The loops step through the ring with this cursor instead of dividing by
// the stage count, a runtime value: the division was 4.7% of MTP's warp samples.
struct RingCursor {
  int stage = 0;
  uint32_t phase = 0;

  __device__ __forceinline__ void advance(int num_stages) {
    if (++stage == num_stages) {
      stage = 0;
      phase ^= 1u;
    }
  }
  // The slot one step back (derived, so that a loop need not carry a second cursor).
  __device__ __forceinline__ RingCursor previous(int num_stages) const {
    return stage == 0 ? RingCursor{num_stages - 1, phase ^ 1u} : RingCursor{stage - 1, phase};
  }
};

// Where one of the warpgroup's 64 rows comes from.
struct RowSource {
  int tile_token;  // token index within the tile
  int head;        // query head within the KV head's group
  bool valid;
};

__device__ __forceinline__ RowSource row_source(const AttentionParams& p, const TilePlan& plan,
                                                int warpgroup, int head_chunk, int row) {
  const int token_in_warpgroup =
      static_cast<int>(quotient(static_cast<uint32_t>(row), p.heads_per_chunk_divisor));
  RowSource source;
  source.tile_token = warpgroup * p.tokens_per_warpgroup + token_in_warpgroup;
  source.head = head_chunk * p.heads_per_chunk + row - token_in_warpgroup * p.heads_per_chunk;
  source.valid = token_in_warpgroup < p.tokens_per_warpgroup && source.head < p.group_size &&
                 source.tile_token < plan.num_tokens;
  return source;
}

// Exclusive prefix sum of one value per thread over the whole CTA.
__device__ __forceinline__ int32_t block_exclusive_scan(int32_t value, int32_t* warp_totals,
                                                        int32_t* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int32_t inclusive = value;
  for (int offset = 1; offset < 32; offset *= 2) {
    int32_t other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  // Lane w holds warp w's total: the warps before this one and all of them are two warp-wide
  // reductions (a loop over the totals, unrolled by the compiler, spilled a register).
  const int32_t lane_total = lane < static_cast<int>(blockDim.x / 32) ? warp_totals[lane] : 0;
  const int32_t warp_offset = __reduce_add_sync(0xffffffffu, lane < warp ? lane_total : 0);
  *total = __reduce_add_sync(0xffffffffu, lane_total);
  return warp_offset + inclusive - value;
}

// Finds which request holds tile `tile_index` and writes the tile's request, rows and first
// query position to the header. Every thread takes one request per round, so up to blockDim.x
// requests cost one round of (independent) loads and one block-wide scan of their tile counts;
// a warp walking them 32 at a time paid one load latency per 32 requests. The launch checked
// that the tile count fits int32.
__device__ inline void locate_tile(const AttentionParams& p, const Smem& smem, int64_t tile_index) {
  const int tid = threadIdx.x;
  SmemHeader& header = smem.header();
  int64_t remaining = tile_index;
  for (int64_t base = 0; base < p.batch_size; base += blockDim.x) {
    const int64_t b = base + tid;
    const bool exists = b < p.batch_size;
    // Everything the tile needs of request b is loaded up front, in one round of loads.
    const RowRange rows = exists ? clamped_range(p.cu_seqlens_q, b, p.total_q) : RowRange{0, 0};
    const KeyLengths lengths = exists ? request_key_lengths(p.is_paged, p.cu_seqlens_k,
                                                            p.seqused_k, b, p.total_k,
                                                            p.max_pages)
                                      : KeyLengths{0, 0};
    const int64_t seqlen_k = lengths.readable;
    const int64_t first_key_row =
        exists && !p.is_paged ? clamped_range(p.cu_seqlens_k, b, p.total_k).begin : 0;
    const int64_t first_position =
        exists ? first_query_position(p.q_offset_mode, p.q_offset_value, p.q_offset_per_request,
                                      b, rows.end - rows.begin, lengths.declared)
               : 0;
    // cu_seqlens_q is int32, so a request's row count fits int32: 32-bit division, not the
    // 64-bit division subroutine.
    const int32_t tiles = (static_cast<int32_t>(rows.end - rows.begin) + p.tokens_per_tile - 1) /
                          p.tokens_per_tile;
    int32_t round_total = 0;
    const int32_t before = block_exclusive_scan(tiles, header.warp_totals, &round_total);
    if (remaining < round_total) {  // the same decision in every thread
      if (before <= remaining && remaining < before + tiles) {
        const int64_t first_row =
            rows.begin + static_cast<int64_t>(remaining - before) * p.tokens_per_tile;
        header.batch_index = static_cast<int32_t>(b);
        header.tile_first_row = static_cast<int32_t>(first_row);
        header.tile_num_tokens = static_cast<int32_t>(
            min(static_cast<int64_t>(p.tokens_per_tile), rows.end - first_row));
        header.request_seqlen_k = static_cast<int32_t>(seqlen_k);
        header.request_first_key_row = static_cast<int32_t>(first_key_row);
        header.tile_first_position = first_position + (first_row - rows.begin);
      }
      return;
    }
    remaining -= round_total;
    __syncthreads();  // the next round's scan rewrites warp_totals
  }
  // Past the requests' tiles: rows outside every request ([0, cu_seqlens_q[0]) and
  // [cu_seqlens_q[B], total_q)) read no key, so they get tiles that write out = 0, lse = -inf.
  if (tid != 0) return;
  header.batch_index = -1;
  const int64_t head_end = clamp_i64(p.cu_seqlens_q[0], 0, p.total_q);
  const int64_t tail_begin = clamp_i64(p.cu_seqlens_q[p.batch_size], head_end, p.total_q);
  const int64_t head_tiles = (head_end + p.tokens_per_tile - 1) / p.tokens_per_tile;
  const int64_t tail_tiles = (p.total_q - tail_begin + p.tokens_per_tile - 1) / p.tokens_per_tile;
  int64_t first_row, range_end;
  if (remaining < head_tiles) {
    first_row = remaining * p.tokens_per_tile;
    range_end = head_end;
  } else if (remaining - head_tiles < tail_tiles) {
    first_row = tail_begin + (remaining - head_tiles) * p.tokens_per_tile;
    range_end = p.total_q;
  } else {
    return;
  }
  header.batch_index = 0;  // any request: with no visible key nothing of it is read
  header.tile_first_row = static_cast<int32_t>(first_row);
  header.tile_num_tokens =
      static_cast<int32_t>(min(static_cast<int64_t>(p.tokens_per_tile), range_end - first_row));
  header.request_seqlen_k = 0;
  header.request_first_key_row = 0;
  header.tile_first_position = 0;
}

// Keys [0, limit) of the located tile's token t are visible to it (causal position, sequence
// length); 0 for slots past the tile's tokens.
__device__ __forceinline__ int64_t tile_token_key_limit(const AttentionParams& p,
                                                        const SmemHeader& header, int t) {
  const int64_t limit = t < header.tile_num_tokens
                            ? key_limit(p.causal, header.tile_first_position + t,
                                        header.request_seqlen_k)
                            : 0;
  return clamp_i64(limit, 0, header.request_seqlen_k);
}

// Where tile token t's list ends before rule 1 looks at it: topk, or the causal entry limit's
// count (common/visibility.h: entries_read). Tokens past the tile's have no entries.
__device__ __forceinline__ int32_t tile_token_entries(const AttentionParams& p,
                                                      const SmemHeader& header, int t) {
  return t < header.tile_num_tokens
             ? entries_read(p.causal_entry_limit, header.tile_first_position + t, p.topk)
             : p.topk;
}

// Puts a and b (elements i < j of a bitonic pass) in ascending or descending order.
__device__ __forceinline__ void compare_exchange(int64_t& a, int64_t& b, bool ascending) {
  if ((a > b) == ascending) {
    const int64_t t = a;
    a = b;
    b = t;
  }
}

// Sorts the first `count` (a power of two, at most 128) of the 128 values one warp holds, lane l
// holding elements 4l .. 4l + 3, ascending and bitonically in registers: no block barrier per
// pass. Blocks of a pass never cross `count`. The pass loops stay rolled: planning runs once
// per CTA, so its code is fetched cold, and short code is what makes it fast.
__device__ __forceinline__ void warp_bitonic_sort(int64_t (&value)[4], int count) {
  const int first = (threadIdx.x % 32) * 4;
#pragma unroll 1
  for (int size = 2; size <= count; size *= 2) {
#pragma unroll 1
    for (int stride = size / 2; stride > 0; stride /= 2) {
      if (stride >= 4) {  // partner: the same element of lane ^ (stride / 4)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int i = first + r;
          const int64_t other = __shfl_xor_sync(0xffffffffu, value[r], stride / 4);
          const bool keep_smaller = ((i & stride) == 0) == ((i & size) == 0);
          value[r] = keep_smaller ? min(value[r], other) : max(value[r], other);
        }
      } else if (stride == 2) {
        compare_exchange(value[0], value[2], (first & size) == 0);
        compare_exchange(value[1], value[3], ((first + 1) & size) == 0);
      } else {
        compare_exchange(value[0], value[1], (first & size) == 0);
        compare_exchange(value[2], value[3], ((first + 2) & size) == 0);
      }
    }
  }
}

// Entry e of a tile's tokens x topk index list is position e % topk of token e / topk. The
// quotient comes from the host's fast divisor: a runtime division is about fifteen
// instructions, and planning runs its code once per CTA, cold, on the way to the first load.
struct EntryPlace {
  int token;
  int position;
};

__device__ __forceinline__ EntryPlace entry_place(const AttentionParams& p, int e) {
  const int token = static_cast<int>(quotient(static_cast<uint32_t>(e), p.topk_divisor));
  return EntryPlace{token, e - token * p.topk};
}

constexpr int64_t kInvalidCandidate = INT64_MAX;
constexpr int kWarpSortMax = kWarpPlanMaxEntries;  // sorted by one warp in registers, 4 per lane

// Entry e of the tile's tokens x topk index list belongs to token e / topk. The entries live in
// shared memory (entry_blocks), and every loop over them is rolled (#pragma unroll 1): a CTA
// runs planning once, with cold instruction caches, and unrolled copies of these loops made it
// take about 5 us on the H200.
// Runs after locate_tile on every thread of a located tile (batch_index >= 0); ends with a
// barrier.
__device__ inline TilePlan plan_union(const AttentionParams& p, const Smem& smem, int kv_head,
                                      int split) {
  const int tid = threadIdx.x, threads = blockDim.x;
  SmemHeader& header = smem.header();
  const int topk = p.topk;
  // Only the tile's existing tokens have entries (a decode tile often holds one token).
  const int num_entries = header.tile_num_tokens * topk;
  int32_t* entry_blocks = smem.entry_blocks();
  int32_t* first_negative = smem.token_first_negative();
  int32_t* limits = smem.token_key_limit();

  // Each index entry is read from global memory once.
#pragma unroll 1
  for (int e = tid; e < num_entries; e += threads) {
    const EntryPlace place = entry_place(p, e);
    const int64_t row = header.tile_first_row + place.token;
    entry_blocks[e] = p.q2k_indices[kv_head * p.idx_stride_head + row * p.idx_stride_token +
                                    place.position * p.idx_stride_topk];
  }
#pragma unroll 1
  for (int t = tid; t < p.tokens_per_tile; t += threads) {
    first_negative[t] = tile_token_entries(p, header, t);
    limits[t] = static_cast<int32_t>(tile_token_key_limit(p, header, t));
  }
  __syncthreads();
  FLASHMSA_MARK(kMarkEntriesRead);

  // Rule 1: the first negative entry ends a token's list (if the entry limit has not already).
#pragma unroll 1
  for (int e = tid; e < num_entries; e += threads) {
    if (entry_blocks[e] < 0) {
      const EntryPlace place = entry_place(p, e);
      atomicMin(&first_negative[place.token], place.position);
    }
  }
  __syncthreads();
  FLASHMSA_MARK(kMarkNegativesCut);

  // Rules 2 and 3: keep the entries that select keys, then sort (block, TMA coordinate) pairs so
  // that duplicates become neighbours (invalid entries sort last). Dropped entries become -1.
  int64_t* candidates = smem.sort_buffer();
  int padded = 1;
  while (padded < num_entries) padded *= 2;
#pragma unroll 1
  for (int e = tid; e < padded; e += threads) {
    int64_t key = kInvalidCandidate;
    if (e < num_entries) {
      const EntryPlace place = entry_place(p, e);
      const int token = place.token;
      const int32_t block = entry_blocks[e];
      if (place.position < first_negative[token] &&
          block_selects_keys(block, limits[token], p.is_paged, p.max_pages)) {
        const int64_t coord =
            p.is_paged ? page_of_block(p.page_table, p.page_table_stride_batch,
                                       p.page_table_stride_page, header.batch_index, block,
                                       p.num_pages)
                       : header.request_first_key_row + static_cast<int64_t>(block) * kBlockSize;
        if (coord >= 0) key = (static_cast<int64_t>(block) << 32) | static_cast<uint32_t>(coord);
      }
      if (key == kInvalidCandidate) entry_blocks[e] = -1;
    }
    candidates[e] = key;
  }
  __syncthreads();
  FLASHMSA_MARK(kMarkCandidates);
  if (padded <= kWarpSortMax) {
    if (tid < 32) {
      int64_t value[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        value[r] = tid * 4 + r < padded ? candidates[tid * 4 + r] : kInvalidCandidate;
      }
      warp_bitonic_sort(value, padded);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if (tid * 4 + r < padded) candidates[tid * 4 + r] = value[r];
      }
    }
    __syncthreads();
  } else {
#pragma unroll 1
    for (int size = 2; size <= padded; size *= 2) {
#pragma unroll 1
      for (int stride = size / 2; stride > 0; stride /= 2) {
#pragma unroll 1
        for (int i = tid; i < padded; i += threads) {
          const int partner = i ^ stride;
          if (partner > i) compare_exchange(candidates[i], candidates[partner], (i & size) == 0);
        }
        __syncthreads();
      }
    }
  }

  FLASHMSA_MARK(kMarkSorted);
  // Compact the distinct valid pairs into the union, each thread over a contiguous chunk.
  const int chunk = (padded + threads - 1) / threads;
  const int begin = min(tid * chunk, padded), end = min(begin + chunk, padded);
  auto is_first = [&](int i) {
    return candidates[i] != kInvalidCandidate && (i == 0 || candidates[i] != candidates[i - 1]);
  };
  int32_t firsts = 0;
#pragma unroll 1
  for (int i = begin; i < end; ++i) firsts += is_first(i);
  int32_t union_size = 0;
  int32_t position = block_exclusive_scan(firsts, header.warp_totals, &union_size);
#pragma unroll 1
  for (int i = begin; i < end; ++i) {
    if (!is_first(i)) continue;
    smem.union_blocks()[position] = static_cast<int32_t>(candidates[i] >> 32);
    smem.union_coords()[position] = static_cast<int32_t>(candidates[i] & 0xffffffff);
    ++position;
  }
#pragma unroll 1
  for (int i = tid; i < union_size * p.smem_layout.mask_words; i += threads) {
    smem.token_mask(0)[i] = 0;
  }
  __syncthreads();
  FLASHMSA_MARK(kMarkCompacted);

  // Which tokens selected each union block (duplicates set the same bit once).
#pragma unroll 1
  for (int e = tid; e < num_entries; e += threads) {
    const int32_t block = entry_blocks[e];
    if (block < 0) continue;
    const int token = entry_place(p, e).token;
    int lo = 0, hi = union_size - 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (smem.union_blocks()[mid] < block) lo = mid + 1; else hi = mid;
    }
    atomicOr(&smem.token_mask(lo)[token / 32], 1u << (token % 32));
  }
  __syncthreads();
  return tile_plan(header, union_size, split, p.splits_divisor);
}

}  // namespace flashmsa::sm90
