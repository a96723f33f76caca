// The one-token decode kernel: one CTA per (query token, KV head, KV split) of a call whose
// requests hold one query token each (decode batches), or a few whose rows fit one CTA per SM
// (multi-token prediction at small batches: split_rules.h), at most 16 query heads per KV head
// and topk <= 32. It computes what prefill_kernel computes for such a call, with a start made for
// latency:
//   warp 0      plans the token in registers (index entries, the request's lengths and offset
//               in one round of loads; the pages of the selected blocks in a second one, read
//               from shared memory when the guessed request held; the set rules as ballots and
//               a match), then streams the slice's blocks with TMA;
//   warps 1-4   load the token's query rows and the guessed request's page-table row
//               meanwhile, then run the one-token consumer (decode_consumer.cuh) and the
//               cluster reduction of the splits.
// prefill_kernel spends about 5 us of a 10 us batch-1 call before its first K lands: a block-wide
// request scan, shared-memory planning buffers and two warpgroups of code run cold on every
// CTA. Here nothing stands between the two rounds of loads and the first TMA.
// The consumers are threads 32..159; their index within the warpgroup is threadIdx.x % 128, a
// permutation of 0..127, which is all the consumer and the reduction rely on. Any row-to-request
// mapping is right (the plan searches when row t is not request t's), so requests of several
// rows come here too, one CTA per row.
#pragma once

#include <stdint.h>

#include "common/visibility.h"
#include "sm90/cluster_reduce.cuh"
#include "sm90/decode_consumer.cuh"
#include "sm90/kernel_traits.h"
#include "sm90/mma.cuh"
#include "sm90/nvfp4_convert.cuh"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/producer.cuh"
#include "sm90/ptx.cuh"
#include "sm90/timeline.cuh"
#include "sm90/warp_planning.cuh"

namespace flashmsa::sm90 {

constexpr int kDecodeThreads = 32 + 128;  // the planner-producer warp, one consumer warpgroup
constexpr int kDecodeCtasPerSm = 2;       // register budget: 65536 / (2 x 160) = 204 per thread
constexpr uint32_t kPlanReadyBarrier = 2;  // named barrier: the plan is in shared memory
constexpr uint32_t kPageRowBarrier = 3;    // named barrier: the guessed page-table row is too

// The guessed request's page-table row, which warps 1-4 load at entry while warp 0 loads the
// index entries, so that the plan's second round of loads reads shared memory instead of
// global memory when the guess holds (a dependent global round trip, about 0.4 us of every
// CTA's start). Eight pages per consumer thread (load_page_row, shared with prefill_kernel's
// warp planning): 1024 pages, a 131072-key request; blocks past that are looked up in global
// memory as before. It lives in the second Q panel's rows 16..63, which a one-token tile never
// loads (decode_consumer.cuh's exchange uses the first panel's).
constexpr int kCachedPageRow = 128 * kPageRowLoadsPerThread;
static_assert(kDecodeRows * 128 + kCachedPageRow * sizeof(int32_t) <= kQPanelBytes,
              "the cached page row must fit beside the token's Q rows");

__device__ __forceinline__ int32_t* cached_page_row(const Smem& smem) {
  return reinterpret_cast<int32_t*>(smem.q(0) + kQPanelBytes + kDecodeRows * 128);
}

// Pages of request `token` (the guess that row t is request t) that the consumers cache: none
// for flat K/V or a row past the batch.
__device__ __forceinline__ int cached_page_row_length(const AttentionParams& p, int64_t token) {
  if (!p.is_paged || token >= p.batch_size) return 0;
  return static_cast<int>(min(p.max_pages, static_cast<int64_t>(kCachedPageRow)));
}

// What the plan needs of a query row's request: its rows, key length, first key row (flat)
// and the row's visible key limit (contract sections 4 and 5); request -1: none (no key).
struct TokenRequest {
  int64_t batch_index;
  int64_t seqlen_k;
  int64_t first_key_row;
  int64_t key_limit;
  int32_t entries;  // of the index row it may read (entries_read: the causal entry limit)
  bool holds_token;
};

// Every load is independent of the others, so they go out in one round.
__device__ __forceinline__ TokenRequest token_request(const AttentionParams& p, int64_t b,
                                                      int64_t token) {
  TokenRequest r{b, 0, 0, 0, 0, false};
  if (b < 0) return r;
  const RowRange rows = clamped_range(p.cu_seqlens_q, b, p.total_q);
  const KeyLengths lengths = request_key_lengths(p.is_paged, p.cu_seqlens_k, p.seqused_k, b,
                                                 p.total_k, p.max_pages);
  r.seqlen_k = lengths.readable;
  if (!p.is_paged) r.first_key_row = clamped_range(p.cu_seqlens_k, b, p.total_k).begin;
  const int64_t position = first_query_position(p.q_offset_mode, p.q_offset_value,
                                                p.q_offset_per_request, b,
                                                rows.end - rows.begin, lengths.declared) +
                           (token - rows.begin);
  r.key_limit = clamp_i64(key_limit(p.causal, position, r.seqlen_k), 0, r.seqlen_k);
  r.entries = entries_read(p.causal_entry_limit, position, p.topk);
  r.holds_token = rows.begin <= token && token < rows.end;
  return r;
}

// The first request whose rows hold `token`, 32 requests per round of loads (the warp); -1 for
// a row outside every request.
__device__ __forceinline__ int64_t search_request(const AttentionParams& p, int64_t token) {
  const int lane = threadIdx.x % 32;
#pragma unroll 1
  for (int64_t base = 0; base < p.batch_size; base += 32) {
    const int64_t b = base + lane;
    bool holds = false;
    if (b < p.batch_size) {
      const RowRange rows = clamped_range(p.cu_seqlens_q, b, p.total_q);
      holds = rows.begin <= token && token < rows.end;
    }
    const uint32_t holders = __ballot_sync(0xffffffffu, holds);
    if (holders != 0) return base + __ffs(holders) - 1;
  }
  return -1;
}

// Warp 0: the token's plan, as prefill_kernel's planning would make it for a one-token tile
// (contract section 4; the union in entry order, first occurrences, as warp planning keeps it),
// into the header and the union buffers. Lane l holds index entry l. Returns the union size.
__device__ inline int plan_decode_token(const AttentionParams& p, const Smem& smem, int64_t token,
                                        int kv_head) {
  const int lane = threadIdx.x % 32;
  // Round one: the entries and, on the guess that row `token` is request `token` (a decode
  // batch: cu_seqlens_q = 0, 1, ..., B), that request's lengths and offset. Every lane loads
  // the same request words (one transaction each); a wrong guess costs a search.
  int32_t entry = -1;
  if (lane < p.topk) {
    entry = p.q2k_indices[kv_head * p.idx_stride_head + token * p.idx_stride_token +
                          lane * p.idx_stride_topk];
  }
  TokenRequest request = token_request(p, token < p.batch_size ? token : -1, token);
  if (!request.holds_token) request = token_request(p, search_request(p, token), token);
  const int64_t limit = request.key_limit;
  FLASHMSA_MARK_BY(0, kMarkLocated);
  // Round two (paged): the surviving blocks' pages, from the consumers' copy of the row when
  // the guess held (the row they loaded is this request's), else from global memory.
  named_barrier_sync(kPageRowBarrier, kDecodeThreads);
  FLASHMSA_MARK_BY(0, kMarkPageRowShared);
  const int cached_pages = request.batch_index == token ? cached_page_row_length(p, token) : 0;
  const int union_size =
      plan_one_token_union(p, smem, entry, limit, request.entries,
                           [&](int32_t block) -> int64_t {
        if (!p.is_paged) return request.first_key_row + static_cast<int64_t>(block) * kBlockSize;
        if (block < cached_pages) return cached_page(cached_page_row(smem), block, p.num_pages);
        return page_of_block(p.page_table, p.page_table_stride_batch, p.page_table_stride_page,
                             request.batch_index, block, p.num_pages);
      }).size;
  if (lane == 0) {
    SmemHeader& header = smem.header();
    // A row outside every request is planned as request 0 with no key (prefill_kernel does the
    // same): the consumers then write out = 0 and lse = -inf.
    header.batch_index = request.batch_index >= 0 ? static_cast<int32_t>(request.batch_index) : 0;
    header.tile_first_row = static_cast<int32_t>(token);  // the launch keeps total_q in int32
    header.tile_num_tokens = 1;
    header.request_seqlen_k = static_cast<int32_t>(request.seqlen_k);
    header.union_size = union_size;
    smem.token_key_limit()[0] = static_cast<int32_t>(limit);
  }
  __syncwarp();
  FLASHMSA_MARK_BY(0, kMarkPlanned);
  return union_size;
}

// Warps 1-4: the token's query rows (heads kv_head * G .. + G - 1; rows past G are zero) into
// the swizzled Q buffer, 16 rows of 16 chunks, two chunks per thread.
template <typename Element>
__device__ __forceinline__ void load_decode_queries(const AttentionParams& p, const Smem& smem,
                                                    int64_t token, int kv_head) {
  constexpr int kChunksPerRow = kHeadDim * 2 / 16;
  const int thread = threadIdx.x % 128;
  uint4 value[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = thread + 128 * i, row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    value[i] = make_uint4(0, 0, 0, 0);
    if (row < p.group_size) {
      const Element* q = static_cast<const Element*>(p.q) + token * p.q_stride_token +
                         (kv_head * p.group_size + row) * p.q_stride_head + chunk * 8;
      value[i] = __ldg(reinterpret_cast<const uint4*>(q));
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = thread + 128 * i, row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    *reinterpret_cast<uint4*>(smem.q(0) + swizzled_chunk_offset(row, chunk, kQPanelBytes)) =
        value[i];
  }
  FLASHMSA_MARK(kMarkQueriesLoaded);
}

// kKv: how K and V are stored; converted formats land in compact stages of one box, which the
// consumer warps read and convert in registers (decode_consumer.cuh).
template <typename Element, bool kTemperatureLse, KvFormat kKv = KvFormat::kNative>
__global__ void __launch_bounds__(kDecodeThreads, kDecodeCtasPerSm)
    decode_kernel(const __grid_constant__ AttentionParams params) {
  extern __shared__ uint8_t shared_memory_raw[];
  const Smem smem = aligned_smem(shared_memory_raw, params.smem_layout);
  const CtaWork work = cta_work(params);  // tiles_outer: one-token tile = query row
  const int64_t token = work.tile;
  SmemHeader& header = smem.header();

  FLASHMSA_MARK(kMarkEntry);
  if (threadIdx.x == 0) {
    // It never speculates; with staged scales the full barriers also count warp 0's 32 lanes.
    init_barriers(header, params.smem_layout.num_stages, 128, false, full_barrier_arrivals(kKv));
  } else if (threadIdx.x == 1) {
    prefetch_tensor_map(&params.tma_k);
    prefetch_tensor_map(&params.tma_v);
  }
  if (params.push_reduce) set_up_push<kTemperatureLse>(params, smem, work.split);
  // Everything above overlaps the previous kernel's tail (programmatic dependent launch), and
  // so does each role's jump to its own code: the grid wait is the first thing in each branch.
  // Warp 0's code lies past the consumers' (49 KB on), and the first fetch of a far branch
  // target stalls the warp (ncu: 0.3-0.4 us at the one far jump on the plan's path after
  // round one). Made after the wait, this jump was on every CTA's way to its first load: with
  // it before, batch 1 takes 5.60 us against 5.77 and batch 16 0.33 us less.
  if (threadIdx.x < 32) {
    wait_for_previous_grid();
    FLASHMSA_MARK(kMarkWaited);
    const int union_size = plan_decode_token(params, smem, token, work.kv_head);
    // The plan (and, through thread 0's program order, the barriers' initialisation) is
    // published to the consumers by the named barrier; the producer does not wait for them.
    named_barrier_arrive(kPlanReadyBarrier, kDecodeThreads);
    allow_next_grid_launch();
    FLASHMSA_MARK_BY(0, kMarkProducerReleased);
    // NVFP4 and per-token fp8: lane 0 loads each block's boxes as produce does, and every lane
    // stages the block's scales beside them (the consumer lanes loading them at the block put a
    // global round trip on each block's chain).
    if constexpr (stages_scales(kKv)) {
      stage_scales_beside_blocks<kKv, true>(
          params, smem, tile_plan(header, union_size, work.split, params.splits_divisor),
          work.kv_head);
    } else if (threadIdx.x == 0) {
      produce<false, kKv, is_converted(kKv)>(
          params, smem, tile_plan(header, union_size, work.split, params.splits_divisor),
          work.kv_head, SpeculativeLoad{-1, -1});
    }
    return;
  }
  wait_for_previous_grid();
  FLASHMSA_MARK(kMarkWaited);
  // The guessed request's page row: its loads go out with the query rows' and land in the
  // second Q panel's idle rows once those are stored.
  const int page_row_length = cached_page_row_length(params, token);
  const PageRowLoads pages =
      load_page_row<kDecodeThreads - 32>(params, token, page_row_length);
  load_decode_queries<Element>(params, smem, token, work.kv_head);
  store_page_row<kDecodeThreads - 32>([&] { return cached_page_row(smem); }, pages,
                                      page_row_length);
  named_barrier_arrive(kPageRowBarrier, kDecodeThreads);
  named_barrier_sync(kPlanReadyBarrier, kDecodeThreads);
  allow_next_grid_launch();
  const TilePlan plan = tile_plan(header, header.union_size, work.split, params.splits_divisor);
  consume_one_token<Element, kTemperatureLse, kKv, is_converted(kKv)>(params, smem, plan,
                                                                     work.kv_head, 0);
}

}  // namespace flashmsa::sm90
