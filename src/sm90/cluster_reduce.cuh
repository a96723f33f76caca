// The KV-split reduction of one-consumer and decode launches, inside the thread-block cluster that the split CTAs
// of one (tile, head column) form (launch.cu: cluster of num_splits CTAs along x; the split
// index is the CTA's rank in the cluster). This replaces the merge kernel's global round trip
// and its launch. Two ways:
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
#include "sm90/softmax.cuh"
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

// Where one combined row goes: its 128 outputs (lane l writes out[4l .. 4l + 3]) and its LSEs
// (lse nullptr: the call asked for none; lse_t only with kTemperatureLse).
template <typename Element>
struct RowDestination {
  Element* out;
  float* lse;
  float* lse_t;
};

template <typename Element, bool kTemperatureLse>
__device__ __forceinline__ RowDestination<Element> row_destination(const AttentionParams& p,
                                                                   int64_t token, int64_t head) {
  const OutputParams& o = p.output;
  return RowDestination<Element>{
      static_cast<Element*>(o.out) + o.out_offset(token, head),
      o.lse ? o.lse + o.lse_offset(token, head) : nullptr,
      kTemperatureLse ? o.lse_t + o.lse_t_offset(token, head) : nullptr};
}

// One warp: row `row` of the tile's partial combined over the splits and written out, for at
// most kSlots splits. Every lane reads all splits' LSEs (lse_of(s), lse_t_of(s): one address
// across the warp, a broadcast) and computes the row's LSE and the splits' weights itself, then
// combines columns 4 * lane .. + 3 (value_of(s): a float4). The code is straight-line: slots
// past `splits` are not read (predicated loads) and count as LSE -inf and value 0, so that
// their weight is exactly 0 and their terms add exactly nothing. It runs once per CTA, cold, at
// the end of every split decode call (batch 1: joined to LSEs combined took 0.8 us with one
// branch per split and the range checks of expf / logf / IEEE division).
template <int kSlots, typename Element, bool kTemperatureLse, typename LseOf, typename LseTOf,
          typename ValueOf>
__device__ __forceinline__ void combine_row_in_slots(const RowDestination<Element>& destination,
                                                     int splits, LseOf lse_of, LseTOf lse_t_of,
                                                     ValueOf value_of) {
  const int lane = threadIdx.x % 32;
  // lse_part[s]: split s's LSE, then its weight before normalisation, exp(lse_s - maximum).
  float lse_part[kSlots], lse_t_part[kSlots];
  float4 value[kSlots];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const bool used = s < splits;
    lse_part[s] = used ? lse_of(s) : -INFINITY;
    if (kTemperatureLse) lse_t_part[s] = used ? lse_t_of(s) : -INFINITY;
    value[s] = used ? value_of(s) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float maximum = -INFINITY, maximum_t = -INFINITY;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    maximum = fmaxf(maximum, lse_part[s]);
    if (kTemperatureLse) maximum_t = fmaxf(maximum_t, lse_t_part[s]);
  }
  // No split read a key: every weight is exp2(-inf) = 0 and the row is 0 with LSE -inf.
  const float base = maximum == -INFINITY ? 0.f : maximum;
  const float base_t = maximum_t == -INFINITY ? 0.f : maximum_t;
  float sum_exp = 0.f, sum_exp_t = 0.f;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    lse_part[s] = exp2_flush((lse_part[s] - base) * kLog2e);
    sum_exp += lse_part[s];
    if (kTemperatureLse) sum_exp_t += exp2_flush((lse_t_part[s] - base_t) * kLog2e);
  }
  const bool empty = maximum == -INFINITY;
  const float lse = empty ? -INFINITY : fmaf(log2_flush(sum_exp), kLn2, maximum);
  FLASHMSA_MARK(kMarkLseCombined);
  const float inverse_sum = empty ? 0.f : reciprocal_flush(sum_exp);
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const float w = lse_part[s] * inverse_sum;
    sum.x = fmaf(w, value[s].x, sum.x);
    sum.y = fmaf(w, value[s].y, sum.y);
    sum.z = fmaf(w, value[s].z, sum.z);
    sum.w = fmaf(w, value[s].w, sum.w);
  }
  store4(destination.out + 4 * lane, sum);
  if (lane == 0) {
    if (destination.lse) *destination.lse = lse;
    if (kTemperatureLse) {
      *destination.lse_t =
          maximum_t == -INFINITY ? -INFINITY : fmaf(log2_flush(sum_exp_t), kLn2, maximum_t);
    }
  }
}

// combine_row_in_slots with the fewest power-of-two slots that hold `splits` (at most
// kMaxClusterSplits), so that a call of few splits runs little code.
template <typename Element, bool kTemperatureLse, typename LseOf, typename LseTOf,
          typename ValueOf>
__device__ __forceinline__ void combine_row_over_splits(const RowDestination<Element>& destination,
                                                        int splits, LseOf lse_of,
                                                        LseTOf lse_t_of, ValueOf value_of) {
  static_assert(kMaxClusterSplits == 16, "the slot counts below cover 16 splits");
  if (splits <= 2) {
    combine_row_in_slots<2, Element, kTemperatureLse>(destination, splits, lse_of, lse_t_of,
                                                      value_of);
  } else if (splits <= 4) {
    combine_row_in_slots<4, Element, kTemperatureLse>(destination, splits, lse_of, lse_t_of,
                                                      value_of);
  } else if (splits <= 8) {
    combine_row_in_slots<8, Element, kTemperatureLse>(destination, splits, lse_of, lse_t_of,
                                                      value_of);
  } else {
    combine_row_in_slots<16, Element, kTemperatureLse>(destination, splits, lse_of, lse_t_of,
                                                       value_of);
  }
}

// All consumer threads of every CTA of the cluster, after publish_partial: CTA r's warp w
// combines rows r + S w, r + S (w + 4), ... of all S partials, read through distributed shared
// memory.
template <typename Element, bool kTemperatureLse>
__device__ inline void reduce_over_cluster(const AttentionParams& p, const Smem& smem,
                                           const TilePlan& plan, int kv_head, int head_chunk) {
  // A multi-token tile of a push launch: the entry's arrival (set_up_push) ends its phase here.
  if (p.push_reduce) cluster_wait();
  cluster_barrier_sync();  // every split's partial is in its shared memory
  FLASHMSA_MARK(kMarkClusterJoined);
  const int splits = p.num_splits, rank = plan.split;
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
#pragma unroll 1
  for (int row = rank + splits * warp; row < kRowsPerWarpgroup; row += 4 * splits) {
    const RowSource source = row_source(p, plan, 0, head_chunk, row);
    if (!source.valid) continue;  // warp-uniform
    const float* values = partial_out_rows(smem) + row * kHeadDim + 4 * lane;
    combine_row_over_splits<Element, kTemperatureLse>(
        row_destination<Element, kTemperatureLse>(
            p, plan.first_row + source.tile_token,
            static_cast<int64_t>(kv_head) * p.group_size + source.head),
        splits,
        [&](int s) {
          return load_cluster_shared(cluster_shared_address(&partial_lse_rows(smem)[row], s));
        },
        [&](int s) {
          return load_cluster_shared(cluster_shared_address(&partial_lse_t_rows(smem)[row], s));
        },
        [&](int s) { return load_cluster_shared4(cluster_shared_address(values, s)); });
  }
  FLASHMSA_MARK(kMarkReduced);
  cluster_barrier_sync();  // no CTA leaves while another still reads its shared memory
}

// ---- push -------------------------------------------------------------------------------------

// A reduce-scatter: split r owns the partial's rows r, r + S, r + 2S, ... Every split pushes its
// other rows to their owners and combines and writes the rows it owns, so the traffic and the
// combining are spread over the cluster (pushing every row to one leader made that SM's inbound
// stores the bottleneck: batch 1, eight splits, 11.8 us against 10.4 for the pull).
// A row's owner and its ordinal among the owner's rows (row = owner + S x ordinal), which is
// where it lies in the owner's push slots (kernel_traits.h). Both come from one quotient by
// the split count with the launch's fast divisor (common/fast_divisor.h): a runtime division
// is about twenty dependent instructions on every consumer thread's way to its push.
struct RowPlace {
  int owner;
  int ordinal;
};

__device__ __forceinline__ RowPlace row_place(int row, FastDivisor splits) {
  const uint32_t ordinal = quotient(static_cast<uint32_t>(row), splits);
  return RowPlace{row - static_cast<int>(ordinal * splits.divisor), static_cast<int>(ordinal)};
}

__device__ __forceinline__ int rows_owned(int split, FastDivisor splits) {
  return static_cast<int>(
      quotient(static_cast<uint32_t>(kDecodeRows - split) + splits.divisor - 1, splits));
}

// Bytes one row of one split's partial takes when pushed: its 128 values, then its LSEs.
template <bool kTemperatureLse>
constexpr uint32_t pushed_row_bytes() {
  return kHeadDim * sizeof(float) + sizeof(float) * (kTemperatureLse ? 2 : 1);
}

// Kernel entry, every thread of a push_reduce launch, after thread 0 initialised received_full:
// thread 0 announces the bytes the other splits will push (rows owned x other splits), then
// every thread arrives at the cluster barrier that place_partial waits for (relaxed: thread 0's
// fence.mbarrier_init.release.cluster makes the initialisation visible to the remote writers;
// the expected bytes may be announced after some of them land, which the transaction count
// allows).
template <bool kTemperatureLse>
__device__ __forceinline__ void set_up_push(const AttentionParams& p, const Smem& smem,
                                            int split) {
  if (threadIdx.x == 0) {
    mbarrier_expect_tx(&smem.header().received_full,
                       rows_owned(split, p.splits_divisor) * (p.num_splits - 1) *
                           pushed_row_bytes<kTemperatureLse>());
  }
  cluster_arrive_relaxed();
}

// A consumer thread's share of a split's normalised partial (decode_consumer.cuh): row `row`
// (of kDecodeRows), the four float4 at columns column + kRowPartialStride * j, and the row's
// LSEs, which the row's one thread with sends_lse sends.
constexpr int kRowPartialStride = 8;
struct RowPartial {
  float4 value[4];
  int row;
  int column;
  float lse;
  float lse_t;
  bool sends_lse;
};

// The consumer thread's row and first column of the partial (decode_consumer.cuh's
// gather_row_partial: the even lanes of a quad keep row lane / 4, the odd ones row lane / 4 + 8;
// warp w holds dims 32w .. 32w + 31, four of them per lane pair, strided by kRowPartialStride).
__device__ __forceinline__ int row_partial_row() {
  const int lane = threadIdx.x % 32;
  return lane / 4 + (lane % 2 == 0 ? 0 : 8);
}
__device__ __forceinline__ int row_partial_column() {
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  return 32 * warp + 4 * ((lane % 4) / 2);
}

// A thread's share of a partial into the fp32 row at `row` (kHeadDim values), the row's LSEs
// into *lse and *lse_t (by the row's sending thread): an owner's own rows (push), the CTA's
// partial for the pull, or the workspace for the merge kernel.
template <bool kTemperatureLse>
__device__ __forceinline__ void store_row_partial(const RowPartial& partial, float* row,
                                                  float* lse, float* lse_t) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    *reinterpret_cast<float4*>(row + partial.column + kRowPartialStride * j) = partial.value[j];
  }
  if (partial.sends_lse) {
    *lse = partial.lse;
    if (kTemperatureLse) *lse_t = partial.lse_t;
  }
}

// The receive slot of split `sender` at its owner: the other splits in rank order.
__device__ __forceinline__ int receive_slot(int sender, int owner) {
  return sender < owner ? sender : sender - 1;
}

// Split s's partial of owner `owner`'s rows, in the push slot layout: the owner's own in the
// first V stage (idle once every warp's loop is over), another split's in its receive slot. A
// byte offset from the shared-memory base, so that the owner's loads stay shared-memory loads
// (a choice between two pointers made them generic); values, LSEs and temperature LSEs of
// ordinal i at the float indices below.
__device__ __forceinline__ uint32_t pushed_rows_offset(const SmemLayout& layout, int s,
                                                       int owner) {
  return s == owner ? layout.v : layout.received + receive_slot(s, owner) * layout.push_slot_bytes;
}
__device__ __forceinline__ int pushed_value_index(int ordinal) { return ordinal * kHeadDim; }
__device__ __forceinline__ int pushed_lse_index(const SmemLayout& layout, int ordinal) {
  return layout.push_slot_rows * kHeadDim + ordinal;
}
__device__ __forceinline__ int pushed_lse_t_index(const SmemLayout& layout, int ordinal) {
  return layout.push_slot_rows * (kHeadDim + 1) + ordinal;
}
static_assert(kDecodeRows * (kHeadDim + 2) * sizeof(float) <= kKvTileBytes,
              "an owner's rows must fit in the first V stage");

// What a consumer thread's push and its warp's combine need that does not depend on the data,
// worked out before the slice's loop (prepare_push): after the last block only the partial's
// arithmetic, the stores and the combine remain. Worked out after the loop, these were on every
// CTA's way to its push and, at the owners, between the last push landing and the combine:
// constant-bank loads, a division and 64-bit offsets (graph-replay timeline: the two-slot
// combine of batch 16 began 0.45 us after the join, batch 1's sixteen-slot one 0.64 us).
template <typename Element>
struct PushPlan {
  // This thread's share of the partial (RowPartial: row, column): where its first value and its
  // row's LSEs go in the row owner's push slot for this split. Byte offsets from the
  // shared-memory base when this split owns the row; else cluster addresses at the owner, whose
  // received_full the stores complete on.
  uint32_t values, lse, lse_t, owner_barrier;
  int own;
  // The push slots at this split, as pushed_rows_offset lays them out: its own rows', the first
  // other split's and the stride between the others'; the LSEs' float index in a slot.
  uint32_t own_slot, first_slot, slot_bytes;
  int lse_index, lse_t_index;
  int splits;  // the launch's, for the combine's slot count
  // The warp's owned rows: ordinals warp and warp + 4 of this split's (two or more splits own
  // at most eight rows), whether each holds a query row, and where its combination goes.
  // `waits`: the warp owns a row at all, so it waits for the pushes; warp 0 always does, and
  // that keeps the CTA, whose shared memory the other splits write, alive until they land.
  int waits;
  int owns[2];
  RowDestination<Element> destination[2];
};

// Pins the plan's fields where prepare_push computes them, before the loop, rather than where
// they are used, after the waits (their operands are constant-bank fields). In 0cf5fdb's SASS
// nothing after the owners' wait reads the constant bank.
template <typename Element>
__device__ __forceinline__ void keep_in_registers(PushPlan<Element>& push) {
  keep_in_register(push.values);
  keep_in_register(push.lse);
  keep_in_register(push.lse_t);
  keep_in_register(push.own_slot);
  keep_in_register(push.first_slot);
  keep_in_register(push.slot_bytes);
  keep_in_register(push.lse_index);
  keep_in_register(push.lse_t_index);
  keep_in_register(push.splits);
  keep_in_register(push.waits);
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    keep_in_register(push.owns[k]);
    keep_in_register(push.destination[k].out);
    keep_in_register(push.destination[k].lse);
    keep_in_register(push.destination[k].lse_t);
  }
}

// Every consumer thread of a push launch, after the plan (`plan`: this split's) and before its
// loop. It also arrives on received_full for the CTA (the first consumer thread: its count is
// one; the phase then completes when the pushed bytes have landed) and waits for every split's
// received_full to be initialised and armed (the cluster barrier of set_up_push, long passed by
// then), which the pushes need.
template <typename Element, bool kTemperatureLse>
__device__ __forceinline__ PushPlan<Element> prepare_push(const AttentionParams& p, const Smem& smem,
                                                          const TilePlan& plan, int kv_head,
                                                          int head_chunk) {
  const int split = plan.split, splits = p.num_splits;
  const int warp = (threadIdx.x % 128) / 32;
  PushPlan<Element> push;
  const RowPlace place = row_place(row_partial_row(), p.splits_divisor);
  const uint32_t rows = pushed_rows_offset(smem.layout, split, place.owner);
  push.own = place.owner == split;
  push.values = rows + sizeof(float) * (pushed_value_index(place.ordinal) + row_partial_column());
  push.lse = rows + sizeof(float) * pushed_lse_index(smem.layout, place.ordinal);
  push.lse_t = rows + sizeof(float) * pushed_lse_t_index(smem.layout, place.ordinal);
  push.owner_barrier = 0;
  if (!push.own) {
    push.values = cluster_shared_address(smem.base + push.values, place.owner);
    push.lse = cluster_shared_address(smem.base + push.lse, place.owner);
    push.lse_t = cluster_shared_address(smem.base + push.lse_t, place.owner);
    push.owner_barrier = cluster_shared_address(&smem.header().received_full, place.owner);
  }
  push.own_slot = pushed_rows_offset(smem.layout, split, split);
  push.first_slot = smem.layout.received;
  push.slot_bytes = smem.layout.push_slot_bytes;
  push.lse_index = pushed_lse_index(smem.layout, 0);
  push.lse_t_index = pushed_lse_t_index(smem.layout, 0);
  push.splits = splits;
  const int owned = rows_owned(split, p.splits_divisor);
  push.waits = warp < owned;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int i = warp + 4 * k;
    const RowSource source =
        i < owned ? row_source(p, plan, 0, head_chunk, split + splits * i) : RowSource{};
    push.owns[k] = i < owned && source.valid;
    push.destination[k] = RowDestination<Element>{nullptr, nullptr, nullptr};
    if (push.owns[k]) {
      push.destination[k] = row_destination<Element, kTemperatureLse>(
          p, plan.first_row + source.tile_token,
          static_cast<int64_t>(kv_head) * p.group_size + source.head);
    }
  }
  keep_in_registers(push);
  if (threadIdx.x % 128 == 0) mbarrier_arrive(&smem.header().received_full);
  cluster_wait();
  FLASHMSA_MARK(kMarkClusterReady);
  return push;
}

// A one-token tile's cluster reduction, every consumer thread, with its share of this split's
// partial and the plan prepare_push made before the loop. Rows another split owns are pushed to
// it with st.async; rows this split owns go to its first V stage; once every push has landed,
// warp w combines the owned rows w and w + 4 (of this split's) over all splits, one warp per
// row (combine_row_over_splits): eight threads combining a row one split after the other took
// 1.9 us of batch 1's 8.6.
template <typename Element, bool kTemperatureLse>
__device__ __forceinline__ void reduce_by_push(const Smem& smem, const TilePlan& plan,
                                               const PushPlan<Element>& push,
                                               const RowPartial& partial) {
  if (push.own) {
    // push.values is this thread's first value; store_row_partial adds the column to the row.
    store_row_partial<kTemperatureLse>(
        partial, reinterpret_cast<float*>(smem.base + push.values) - partial.column,
        reinterpret_cast<float*>(smem.base + push.lse),
        reinterpret_cast<float*>(smem.base + push.lse_t));
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      store_cluster_async(push.values + sizeof(float) * kRowPartialStride * j, partial.value[j],
                          push.owner_barrier);
    }
    if (partial.sends_lse) {
      store_cluster_async(push.lse, partial.lse, push.owner_barrier);
      if (kTemperatureLse) store_cluster_async(push.lse_t, partial.lse_t, push.owner_barrier);
    }
  }
  FLASHMSA_MARK(kMarkPushed);
  named_barrier_sync(kConsumerBarrier, 128);  // own rows written
  FLASHMSA_MARK(kMarkOwnersReady);
  if (!push.waits) return;
  mbarrier_wait(&smem.header().received_full, 0);
  FLASHMSA_MARK(kMarkClusterJoined);
  const int lane = threadIdx.x % 32, split = plan.split;
  // One copy of the combine for both rows (selects, not indexing, keep the plan in registers).
#pragma unroll 1
  for (int k = 0; k < 2; ++k) {
    if (!(k == 0 ? push.owns[0] : push.owns[1])) continue;  // warp-uniform
    const RowDestination<Element> destination = k == 0 ? push.destination[0] : push.destination[1];
    const int i = (threadIdx.x % 128) / 32 + 4 * k;
    auto partial_of = [&](int s) {
      const uint32_t slot = s == split ? push.own_slot
                                       : push.first_slot + receive_slot(s, split) * push.slot_bytes;
      return reinterpret_cast<const float*>(smem.base + slot);
    };
    auto lse_of = [&](int s) { return partial_of(s)[push.lse_index + i]; };
    auto lse_t_of = [&](int s) { return partial_of(s)[push.lse_t_index + i]; };
    auto value_of = [&](int s) {
      return *reinterpret_cast<const float4*>(partial_of(s) + pushed_value_index(i) + 4 * lane);
    };
    combine_row_over_splits<Element, kTemperatureLse>(destination, push.splits, lse_of, lse_t_of,
                                                      value_of);
  }
  FLASHMSA_MARK(kMarkReduced);
}

}  // namespace flashmsa::sm90
