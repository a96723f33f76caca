// The KV-split reduction of decode launches, inside the thread-block cluster that the split CTAs
// of one (tile, head column) form (launch.cu: cluster of num_splits CTAs along x; the split
// index is the CTA's rank in the cluster). This replaces the merge kernel's global round trip
// and its launch (docs/performance.md). Two ways:
//   push (one-token tiles of launches with push_reduce): split r owns rows r, r + S, ... of
//     the tile's 16; every split writes its normalised partial's other rows and their LSEs
//     into their owners' receive buffers with st.async, completing on the owner's
//     received_full barrier; each split waits on its own barrier, combines its rows and writes
//     them out. One distributed-shared-memory trip and no cluster barrier at the end (the one
//     barrier that orders the barriers' initialisation before the remote writes is arrived at
//     on entry and waited for just before pushing).
//   pull (the others): each CTA's consumer warpgroup leaves its normalised partial output and
//     LSEs in its own shared memory (the idle first K and V stages); after a cluster barrier,
//     CTA r combines rows r, r + S, r + 2S, ... of all S partials, read through distributed
//     shared memory, and writes out and the LSEs; a second barrier keeps every CTA's shared
//     memory alive until the others are done reading it.
#pragma once

#include <math.h>
#include <stdint.h>

#include "sm90/kernel_traits.h"
#include "sm90/mma.cuh"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/producer.cuh"
#include "sm90/ptx.cuh"
#include "sm90/split_combine.cuh"
#include "sm90/timeline.cuh"

namespace flashmsa::sm90 {

// Partials in shared memory: fp32 out [64 rows][128] in the first K stage (exactly 32 KiB), LSEs
// [64] and temperature LSEs [64] in the first V stage.
__device__ __forceinline__ float* partial_out_rows(const Smem& smem) {
  return reinterpret_cast<float*>(smem.k(0));
}
__device__ __forceinline__ float* partial_lse_rows(const Smem& smem) {
  return reinterpret_cast<float*>(smem.v(0));
}
__device__ __forceinline__ float* partial_lse_t_rows(const Smem& smem) {
  return reinterpret_cast<float*>(smem.v(0)) + kRowsPerWarpgroup;
}

static_assert(kRowsPerWarpgroup * kHeadDim * sizeof(float) <= kKvTileBytes,
              "the partial output of a warpgroup must fit in one K stage");

// A consumer thread's two accumulator rows (row_in_warpgroup[h], those with a query row behind
// them), scaled by scale[h], and their LSEs. Stage 0 may still be receiving a speculative load
// that the plan did not use: it is waited for first (wait_for_speculative_load).
template <bool kTemperatureLse>
__device__ __forceinline__ void publish_partial(const Smem& smem, const Accumulator& o,
                                                const int (&row_in_warpgroup)[2],
                                                const RowSource (&rows)[2],
                                                const float (&scale)[2], const float (&lse)[2],
                                                const float (&lse_t)[2]) {
  wait_for_speculative_load(smem);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!rows[h].valid) continue;
    const int row = row_in_warpgroup[h];
    store_partial_row<kTemperatureLse>(partial_out_rows(smem) + row * kHeadDim,
                                       &partial_lse_rows(smem)[row],
                                       &partial_lse_t_rows(smem)[row], o, h, scale[h], lse[h],
                                       lse_t[h]);
  }
}

// Splits whose partials the pull reads at once (its registers: four per split).
constexpr int kPullBatch = 8;

// All consumer threads of every CTA of the cluster, after publish_partial.
template <typename Element, bool kTemperatureLse>
__device__ inline void reduce_over_cluster(const PrefillParams& p, const Smem& smem,
                                           const TilePlan& plan, int kv_head, int head_chunk) {
  if (p.push_reduce) cluster_wait();  // the entry's arrival (set_up_push) ends its phase here
  cluster_barrier_sync();  // every split's partial is in its shared memory
  FLASHMSA_MARK(kMarkClusterJoined);
  const int splits = p.num_splits, rank = plan.split;
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
#pragma unroll 1
  for (int row = rank + splits * warp; row < kRowsPerWarpgroup; row += 4 * splits) {
    const RowSource source = row_source(p, plan, 0, head_chunk, row);
    if (!source.valid) continue;  // warp-uniform
    // Lane s < splits holds split s's LSEs (splits <= kMaxClusterSplits <= 32).
    float lse_part[2] = {-INFINITY, -INFINITY}, lse_t_part[2] = {-INFINITY, -INFINITY};
    if (lane < splits) {
      lse_part[0] = load_cluster_shared(cluster_shared_address(&partial_lse_rows(smem)[row], lane));
      if (kTemperatureLse) {
        lse_t_part[0] =
            load_cluster_shared(cluster_shared_address(&partial_lse_t_rows(smem)[row], lane));
      }
    }
    const float lse = warp_log_sum_exp(lse_part);
    const float weight = lse == -INFINITY ? 0.f : __expf(lse_part[0] - lse);
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    if (lse != -INFINITY) {
      // Up to kPullBatch splits' values are requested before the first is used: one
      // distributed-shared-memory latency per batch of splits instead of one per split.
      const float* mine = partial_out_rows(smem) + row * kHeadDim + 4 * lane;
#pragma unroll 1
      for (int first = 0; first < splits; first += kPullBatch) {
        float4 value[kPullBatch];
#pragma unroll
        for (int s = 0; s < kPullBatch; ++s) {
          if (first + s < splits) {
            value[s] = load_cluster_shared4(cluster_shared_address(mine, first + s));
          }
        }
#pragma unroll
        for (int s = 0; s < kPullBatch; ++s) {
          const float w = __shfl_sync(0xffffffffu, weight, first + s);
          if (first + s >= splits) continue;
          sum.x += w * value[s].x;
          sum.y += w * value[s].y;
          sum.z += w * value[s].z;
          sum.w += w * value[s].w;
        }
      }
    }
    const int64_t token = plan.first_row + source.tile_token;
    const int64_t head = static_cast<int64_t>(kv_head) * p.group_size + source.head;
    store4(static_cast<Element*>(p.output.out) + p.output.out_offset(token, head) + 4 * lane, sum);
    const float lse_t = kTemperatureLse ? warp_log_sum_exp(lse_t_part) : 0.f;
    if (lane == 0) {
      if (p.output.lse) p.output.lse[p.output.lse_offset(token, head)] = lse;
      if (kTemperatureLse) p.output.lse_t[p.output.lse_t_offset(token, head)] = lse_t;
    }
  }
  FLASHMSA_MARK(kMarkReduced);
  cluster_barrier_sync();  // no CTA leaves while another still reads its shared memory
}

// ---- push -------------------------------------------------------------------------------------

// A reduce-scatter: split r owns the partial's rows r, r + S, r + 2S, ... Every split pushes its
// other rows to their owners and combines and writes the rows it owns, so the traffic and the
// combining are spread over the cluster (pushing every row to one leader made that SM's inbound
// stores the bottleneck: batch 1, eight splits, 11.8 us against 10.4 for the pull).
__device__ __forceinline__ int row_owner(int row, int splits) { return row % splits; }

__device__ __forceinline__ int rows_owned(int split, int splits) {
  return (kDecodeRows - split + splits - 1) / splits;
}

// Bytes one row of one split's partial takes when pushed: its 128 values, then its LSEs.
template <bool kTemperatureLse>
constexpr uint32_t pushed_row_bytes() {
  return kHeadDim * sizeof(float) + sizeof(float) * (kTemperatureLse ? 2 : 1);
}

// Kernel entry, every thread of a push_reduce launch, after thread 0 initialised received_full:
// thread 0 announces the bytes the other splits will push (rows owned x other splits), then
// every thread arrives at the cluster barrier that push_partial waits for (relaxed: thread 0's
// fence.mbarrier_init.release.cluster makes the initialisation visible to the remote writers;
// the expected bytes may be announced after some of them land, which the transaction count
// allows).
template <bool kTemperatureLse>
__device__ __forceinline__ void set_up_push(const PrefillParams& p, const Smem& smem,
                                            int split) {
  if (threadIdx.x == 0) {
    mbarrier_expect_tx(&smem.header().received_full,
                       rows_owned(split, p.num_splits) * (p.num_splits - 1) *
                           pushed_row_bytes<kTemperatureLse>());
  }
  cluster_arrive_relaxed();
}

// A consumer thread's share of a split's combined partial: row `row` (of kDecodeRows), columns
// column .. column + 15, and the row's LSEs (every thread of the row holds them; the row's
// first thread sends them).
struct RowPartial {
  float4 value[4];
  float lse;
  float lse_t;
};

// The receive slot of split `sender` at its owner: the other splits in rank order.
__device__ __forceinline__ int receive_slot(int sender, int owner) {
  return sender < owner ? sender : sender - 1;
}

// Every consumer thread whose row another split owns: into that split's receive buffer,
// completing on its received_full.
template <bool kTemperatureLse>
__device__ __forceinline__ void push_partial(const Smem& smem, int split, int splits, int row,
                                             int column, const RowPartial& partial) {
  const int owner = row_owner(row, splits);
  const uint32_t barrier = cluster_shared_address(&smem.header().received_full, owner);
  const int slot = receive_slot(split, owner);
  const uint32_t rows =
      cluster_shared_address(smem.received_rows(slot) + row * kHeadDim + column, owner);
#pragma unroll
  for (int i = 0; i < 4; ++i) store_cluster_async(rows + 16 * i, partial.value[i], barrier);
  if (column == 0) {
    store_cluster_async(cluster_shared_address(&smem.received_lse(slot)[row], owner),
                        partial.lse, barrier);
    if (kTemperatureLse) {
      store_cluster_async(cluster_shared_address(&smem.received_lse_t(slot)[row], owner),
                          partial.lse_t, barrier);
    }
  }
}

// log sum exp of `own` and the received LSEs at `row` (lse_of(slot) points at a slot's LSEs),
// in rolled loops: the combine runs once per CTA, cold, and its unrolled form (sixteen-way) took
// 1.7 us of a 9 us batch-1 call on the timeline (docs/performance.md).
template <typename LseOf>
__device__ __forceinline__ float combined_lse(float own, int splits, int row, LseOf lse_of) {
  float maximum = own;
#pragma unroll 1
  for (int s = 0; s < splits - 1; ++s) maximum = fmaxf(maximum, lse_of(s)[row]);
  if (maximum == -INFINITY) return -INFINITY;
  float total = __expf(own - maximum);
#pragma unroll 1
  for (int s = 0; s < splits - 1; ++s) total += __expf(lse_of(s)[row] - maximum);
  return maximum + __logf(total);
}

// Every consumer thread whose row this split owns: waits for the other splits' pushes and folds
// them into its own share (lse = log sum_s exp(lse_s), out = sum_s exp(lse_s - lse) out_s), one
// received split per iteration of a rolled loop (see combined_lse).
template <bool kTemperatureLse>
__device__ __forceinline__ void combine_pushed_partials(const Smem& smem, int splits, int row,
                                                        int column, RowPartial& partial) {
  mbarrier_wait(&smem.header().received_full, 0);
  FLASHMSA_MARK(kMarkClusterJoined);
  const float lse = combined_lse(partial.lse, splits, row,
                                 [&](int slot) { return smem.received_lse(slot); });
  const float own_weight = lse == -INFINITY ? 0.f : __expf(partial.lse - lse);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    partial.value[i].x *= own_weight;
    partial.value[i].y *= own_weight;
    partial.value[i].z *= own_weight;
    partial.value[i].w *= own_weight;
  }
  if (lse != -INFINITY) {
#pragma unroll 1
    for (int s = 0; s < splits - 1; ++s) {
      add_weighted_share(partial.value, __expf(smem.received_lse(s)[row] - lse),
                         smem.received_rows(s) + row * kHeadDim + column);
    }
  }
  partial.lse = lse;
  if (kTemperatureLse) {
    partial.lse_t = combined_lse(partial.lse_t, splits, row,
                                 [&](int slot) { return smem.received_lse_t(slot); });
  }
  FLASHMSA_MARK(kMarkReduced);
}

// A one-token tile's cluster reduction, every consumer thread, with its share of this split's
// partial: returns whether the thread's row is this split's to write (then `partial` is the
// combined one). The split's first consumer thread arrives on received_full for the CTA (its
// count is one), whatever its row.
template <bool kTemperatureLse>
__device__ __forceinline__ bool reduce_by_push(const PrefillParams& p, const Smem& smem,
                                               int split, int row, int column,
                                               RowPartial& partial) {
  const int splits = p.num_splits;
  if (threadIdx.x % 128 == 0) mbarrier_arrive(&smem.header().received_full);
  cluster_wait();  // every split's received_full is initialised and armed
  if (row_owner(row, splits) != split) {
    push_partial<kTemperatureLse>(smem, split, splits, row, column, partial);
    return false;
  }
  combine_pushed_partials<kTemperatureLse>(smem, splits, row, column, partial);
  return true;
}

}  // namespace flashmsa::sm90
