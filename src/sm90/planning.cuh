// Per-tile planning, run by every thread of the CTA before the warp roles split:
//   1. find the request and first query row of this CTA's tile (grid sized from shapes only);
//   2. for each token of the tile, its visible key limit (causal position, sequence length);
//   3. the union of the tokens' selected blocks (contract section 4 set semantics), sorted
//      ascending so that flat and paged calls visit keys in the same order (bitwise equality);
//   4. for each union block, the bit mask of tile tokens that selected it.
// Every id read from device memory goes through visibility.h's rules: nothing it says is
// dereferenced before being checked, so garbage indices cannot read out of bounds.
#pragma once

#include <limits.h>
#include <stdint.h>

#include "common/visibility.h"
#include "sm90/kernel_traits.h"
#include "sm90/params.h"

namespace flashmsa::sm90 {

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
};

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
  int32_t warp_offset = 0, sum = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
    if (w == warp) warp_offset = sum;
    sum += warp_totals[w];
  }
  *total = sum;
  return warp_offset + inclusive - value;
}

// Finds which request holds tile `tile_index` and writes the tile's request, rows and first
// query position to the header. Every thread takes one request per round, so up to blockDim.x
// requests cost one round of (independent) loads and one block-wide scan of their tile counts;
// a warp walking them 32 at a time paid one load latency per 32 requests. The launch checked
// that the tile count fits int32.
__device__ inline void locate_tile(const PrefillParams& p, const Smem& smem, int64_t tile_index) {
  const int tid = threadIdx.x;
  SmemHeader& header = smem.header();
  int64_t remaining = tile_index;
  for (int64_t base = 0; base < p.batch_size; base += blockDim.x) {
    const int64_t b = base + tid;
    const bool exists = b < p.batch_size;
    // Everything the tile needs of request b is loaded up front, in one round of loads.
    const RowRange rows = exists ? clamped_range(p.cu_seqlens_q, b, p.total_q) : RowRange{0, 0};
    const int64_t seqlen_k = exists ? request_seqlen_k(p.is_paged, p.cu_seqlens_k, p.seqused_k,
                                                       b, p.total_k, p.max_pages)
                                    : 0;
    const int64_t first_key_row =
        exists && !p.is_paged ? clamped_range(p.cu_seqlens_k, b, p.total_k).begin : 0;
    const int64_t first_position =
        exists ? first_query_position(p.q_offset_mode, p.q_offset_value, p.q_offset_per_request,
                                      b, rows.end - rows.begin, seqlen_k)
               : 0;
    const int32_t tiles =
        static_cast<int32_t>((rows.end - rows.begin + p.tokens_per_tile - 1) / p.tokens_per_tile);
    int32_t round_total = 0;
    const int32_t before = block_exclusive_scan(tiles, header.warp_totals, &round_total);
    if (remaining < round_total) {  // the same decision in every thread
      if (before <= remaining && remaining < before + tiles) {
        const int64_t first_row = rows.begin + (remaining - before) * p.tokens_per_tile;
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

// Sorts the 32 * kPerLane values held by one warp (lane l holds elements l * kPerLane + r)
// ascending, bitonically, in registers: no block barrier per pass. Only the first `count`
// elements (a power of two) are sorted; blocks of a bitonic pass never cross that bound.
template <int kPerLane>
__device__ __forceinline__ void warp_bitonic_sort(int64_t (&value)[kPerLane], int count) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int size = 2; size <= 32 * kPerLane; size *= 2) {
    if (size > count) break;
#pragma unroll
    for (int stride = size / 2; stride > 0; stride /= 2) {
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        const int i = lane * kPerLane + r;
        const bool ascending = (i & size) == 0;
        if (stride >= kPerLane) {  // the partner is in lane ^ (stride / kPerLane), same r
          const int64_t other = __shfl_xor_sync(0xffffffffu, value[r], stride / kPerLane);
          const bool keep_smaller = ((i & stride) == 0) == ascending;
          value[r] = keep_smaller ? min(value[r], other) : max(value[r], other);
        } else if ((r & stride) == 0) {  // the partner is element r + stride of this lane
          const int64_t a = value[r], b = value[r + stride];
          if ((a > b) == ascending) {
            value[r] = b;
            value[r + stride] = a;
          }
        }
      }
    }
  }
}

// Each thread owns the entries e = threadIdx.x + j * blockDim.x of the tile's tokens x topk
// index list, and reads each from global memory once (sized for the smaller, 256-thread CTA).
constexpr int kEntriesPerThread = (kMaxCandidates + 255) / 256;
constexpr int64_t kInvalidCandidate = INT64_MAX;
// Lists of up to 32 * kWarpSortPerLane candidates are sorted by one warp in registers.
constexpr int kWarpSortPerLane = 4;

__device__ inline TilePlan plan_tile(const PrefillParams& p, const Smem& smem, int64_t tile_index,
                                     int kv_head) {
  const int tid = threadIdx.x, threads = blockDim.x;
  locate_tile(p, smem, tile_index);
  __syncthreads();
  SmemHeader& header = smem.header();
  if (header.batch_index < 0) return TilePlan{-1, 0, 0, 0, 0, 0, 0};
  const int topk = p.topk;
  // Only the tile's existing tokens have entries (a decode tile often holds one token).
  const int num_entries = header.tile_num_tokens * topk;

  // The tile's index entries, each read from global memory once; the loads are in flight while
  // the per-token limits are set up.
  int32_t entry_block[kEntriesPerThread];
#pragma unroll
  for (int j = 0; j < kEntriesPerThread; ++j) {
    const int e = tid + j * threads;
    const int token = e / topk, k = e % topk;
    entry_block[j] = -1;
    if (e < num_entries) {
      const int64_t row = header.tile_first_row + token;
      entry_block[j] = p.q2k_indices[kv_head * p.idx_stride_head + row * p.idx_stride_token +
                                     k * p.idx_stride_topk];
    }
  }
  int32_t* first_negative = smem.token_first_negative();
  int32_t* limits = smem.token_key_limit();
  for (int t = tid; t < p.tokens_per_tile; t += threads) {
    first_negative[t] = topk;
    const int64_t limit = t < header.tile_num_tokens
                              ? key_limit(p.causal, header.tile_first_position + t,
                                          header.request_seqlen_k)
                              : 0;
    limits[t] = static_cast<int32_t>(clamp_i64(limit, 0, header.request_seqlen_k));
  }
  __syncthreads();

  // Rule 1: the first negative entry ends a token's list.
#pragma unroll
  for (int j = 0; j < kEntriesPerThread; ++j) {
    const int e = tid + j * threads;
    if (e < num_entries && entry_block[j] < 0) atomicMin(&first_negative[e / topk], e % topk);
  }
  __syncthreads();

  // Rules 2 and 3: keep the entries that select keys, then sort (block, TMA coordinate) pairs so
  // that duplicates become neighbours (invalid entries sort last).
  int64_t* candidates = smem.sort_buffer();
  int padded = 1;
  while (padded < num_entries) padded *= 2;
#pragma unroll
  for (int j = 0; j < kEntriesPerThread; ++j) {
    const int e = tid + j * threads;
    if (e >= padded) continue;
    int64_t key = kInvalidCandidate;
    const int token = e / topk, k = e % topk;
    const int32_t block = entry_block[j];
    if (e < num_entries && k < first_negative[token] &&
        block_selects_keys(block, limits[token], p.is_paged, p.max_pages)) {
      const int64_t coord =
          p.is_paged ? page_of_block(p.page_table, p.page_table_stride_batch,
                                     p.page_table_stride_page, header.batch_index, block,
                                     p.num_pages)
                     : header.request_first_key_row + static_cast<int64_t>(block) * kBlockSize;
      if (coord >= 0) key = (static_cast<int64_t>(block) << 32) | static_cast<uint32_t>(coord);
    }
    entry_block[j] = key == kInvalidCandidate ? -1 : block;
    candidates[e] = key;
  }
  __syncthreads();
  if (padded <= 32 * kWarpSortPerLane) {
    // Small lists (decode; prefill tiles at topk 16): one warp sorts in registers.
    if (tid < 32) {
      int64_t value[kWarpSortPerLane];
#pragma unroll
      for (int r = 0; r < kWarpSortPerLane; ++r) {
        const int i = tid * kWarpSortPerLane + r;
        value[r] = i < padded ? candidates[i] : kInvalidCandidate;
      }
      warp_bitonic_sort(value, padded);
#pragma unroll
      for (int r = 0; r < kWarpSortPerLane; ++r) {
        const int i = tid * kWarpSortPerLane + r;
        if (i < padded) candidates[i] = value[r];
      }
    }
    __syncthreads();
  } else {
    for (int size = 2; size <= padded; size *= 2) {
      for (int stride = size / 2; stride > 0; stride /= 2) {
        for (int i = tid; i < padded; i += threads) {
          const int partner = i ^ stride;
          if (partner > i) {
            const bool ascending = (i & size) == 0;
            const int64_t a = candidates[i], b = candidates[partner];
            if ((a > b) == ascending) {
              candidates[i] = b;
              candidates[partner] = a;
            }
          }
        }
        __syncthreads();
      }
    }
  }

  // Compact the distinct valid pairs into the union, each thread over a contiguous chunk.
  const int chunk = (padded + threads - 1) / threads;
  const int begin = min(tid * chunk, padded), end = min(begin + chunk, padded);
  auto is_first = [&](int i) {
    return candidates[i] != kInvalidCandidate && (i == 0 || candidates[i] != candidates[i - 1]);
  };
  int32_t firsts = 0;
  for (int i = begin; i < end; ++i) firsts += is_first(i);
  int32_t union_size = 0;
  int32_t position = block_exclusive_scan(firsts, header.warp_totals, &union_size);
  for (int i = begin; i < end; ++i) {
    if (!is_first(i)) continue;
    smem.union_blocks()[position] = static_cast<int32_t>(candidates[i] >> 32);
    smem.union_coords()[position] = static_cast<int32_t>(candidates[i] & 0xffffffff);
    ++position;
  }
  for (int i = tid; i < union_size * p.smem_layout.mask_words; i += threads) {
    smem.token_mask(0)[i] = 0;
  }
  __syncthreads();

  // Which tokens selected each union block (duplicates set the same bit once).
#pragma unroll
  for (int j = 0; j < kEntriesPerThread; ++j) {
    if (entry_block[j] < 0) continue;
    const int token = (tid + j * threads) / topk;
    int lo = 0, hi = union_size - 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (smem.union_blocks()[mid] < entry_block[j]) lo = mid + 1; else hi = mid;
    }
    atomicOr(&smem.token_mask(lo)[token / 32], 1u << (token % 32));
  }
  __syncthreads();
  const int split = blockIdx.z;
  const int32_t slice_begin =
      static_cast<int32_t>(static_cast<int64_t>(union_size) * split / p.num_splits);
  const int32_t slice_end =
      static_cast<int32_t>(static_cast<int64_t>(union_size) * (split + 1) / p.num_splits);
  return TilePlan{header.batch_index, header.tile_first_row, header.tile_num_tokens,
                  header.request_seqlen_k, union_size, slice_begin, slice_end};
}

}  // namespace flashmsa::sm90
