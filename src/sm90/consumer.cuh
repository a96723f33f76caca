// A consumer warpgroup: 64 rows = tokens_per_warpgroup tokens x heads_per_chunk query heads of
// one KV head. It loads its Q rows once, then for every union block that one of its tokens
// selected: S = Q K^T (wgmma), mask + online softmax in registers, O += P V (wgmma). Blocks none
// of its tokens selected are skipped (the stage is still waited for and released, which keeps
// the two warpgroups' barrier arrivals in phase order). Epilogue: O / l in q's dtype, and LSEs.
#pragma once

#include <stdint.h>

#include "sm90/cluster_reduce.cuh"
#include "sm90/kernel_traits.h"
#include "sm90/kv_convert.cuh"
#include "sm90/mma.cuh"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/ptx.cuh"
#include "sm90/softmax.cuh"
#include "sm90/split_combine.cuh"
#include "sm90/timeline.cuh"
#include "sm90/token_scales.cuh"

namespace flashmsa::sm90 {

// Q rows into the 128B-swizzled K-major layout wgmma reads: 16-byte chunk c of row r lands at
// chunk (c % 8) ^ (r % 8) of the row in panel c / 8. Rows that don't exist are zero. All of a
// thread's loads are issued before any store, so the warpgroup pays one global-memory latency,
// not one per chunk (the rolled loop cost a decode CTA about 8 latencies).
template <typename Element>
__device__ __forceinline__ void load_queries(const AttentionParams& p, const TilePlan& plan,
                                             uint8_t* q_smem, int warpgroup, int row_group,
                                             int kv_head, int head_chunk) {
  const int thread = threadIdx.x % 128;
  constexpr int kChunksPerRow = kHeadDim * 2 / 16;
  constexpr int kChunksPerThread = kRowsPerWarpgroup * kChunksPerRow / 128;
  uint4 value[kChunksPerThread];
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const int c = thread + i * 128;
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const RowSource source = row_source(p, plan, row_group, head_chunk, row);
    value[i] = make_uint4(0, 0, 0, 0);
    if (source.valid) {
      const Element* q = static_cast<const Element*>(p.q) +
                         (plan.first_row + source.tile_token) * p.q_stride_token +
                         (kv_head * p.group_size + source.head) * p.q_stride_head + chunk * 8;
      value[i] = __ldg(reinterpret_cast<const uint4*>(q));
    }
  }
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const int c = thread + i * 128;
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    *reinterpret_cast<uint4*>(q_smem + swizzled_chunk_offset(row, chunk, kQPanelBytes)) =
        value[i];
  }
  fence_proxy_async_shared();
  named_barrier_sync(1 + warpgroup, 128);
}

// Rows [begin, end) of a stage's two panels become zero, 16 bytes per store, shared by `workers`
// threads (this one is `worker`). Whole rows, so the swizzle does not matter.
__device__ __forceinline__ void zero_value_rows(uint8_t* v_stage, int begin, int end, int worker,
                                                int workers) {
  for (int c = worker; c < (end - begin) * 16; c += workers) {
    const int row = begin + c / 16, chunk = c % 16;
    *reinterpret_cast<uint4*>(v_stage + (chunk / 8) * kKvPanelBytes + row * 128 +
                              (chunk % 8) * 16) = make_uint4(0, 0, 0, 0);
  }
}

// Keys past the request's end in its last block may be anything (another request's keys, an
// unwritten page slot holding NaN). Their scores are masked to -inf, so P is 0 there, but
// 0 * NaN is NaN: zero those V rows. Both warpgroups may do it on the same stage; they write
// the same zeros, so the overlap is harmless.
__device__ __forceinline__ void zero_value_tail(uint8_t* v_stage, int first_invalid_key,
                                                int warpgroup) {
  zero_value_rows(v_stage, first_invalid_key, kBlockKeys, threadIdx.x % 128, 128);
  fence_proxy_async_shared();
  named_barrier_sync(1 + warpgroup, 128);
}

// Shared-rows mode: warpgroup 1 hands its running max, partial sums and O to warpgroup 0 through
// the K stages (idle once both loops are over: every load was waited for), and warpgroup 0
// folds them into its own state. Thread t of both warpgroups holds the same rows and columns.
// Returns whether this warpgroup writes the output.
template <bool kTemperatureLse>
__device__ __forceinline__ bool combine_warpgroups(const Smem& smem, int warpgroup,
                                                   OnlineSoftmax<kTemperatureLse>& softmax,
                                                   Accumulator& o, float temperature) {
  constexpr int kValues = 64 + 6;
  static_assert(kValues * 128 * sizeof(float) <= 2 * kKvTileBytes, "exchange space: 2 stages");
  float* exchange = reinterpret_cast<float*>(smem.k(0)) + threadIdx.x % 128;
  wait_for_speculative_load(smem);  // one the plan did not use may still be landing in stage 0
  named_barrier_sync(kBothConsumersBarrier, 256);  // both loops done with the stages
  if (warpgroup == 1) {
#pragma unroll
    for (int i = 0; i < 64; ++i) exchange[i * 128] = o[i];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      exchange[(64 + h) * 128] = softmax.row_max[h];
      exchange[(66 + h) * 128] = softmax.row_sum[h];
      exchange[(68 + h) * 128] = softmax.row_sum_t[h];
    }
  }
  named_barrier_sync(kBothConsumersBarrier, 256);
  if (warpgroup == 1) return false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float other_max = exchange[(64 + h) * 128];
    const float new_max = fmaxf(softmax.row_max[h], other_max);
    const float offset = new_max == -INFINITY ? 0.f : new_max;
    const float mine = exp2f(softmax.row_max[h] - offset), theirs = exp2f(other_max - offset);
    softmax.row_sum[h] = softmax.row_sum[h] * mine + exchange[(66 + h) * 128] * theirs;
    if constexpr (kTemperatureLse) {
      softmax.row_sum_t[h] =
          softmax.row_sum_t[h] * exp2f(temperature * (softmax.row_max[h] - offset)) +
          exchange[(68 + h) * 128] * exp2f(temperature * (other_max - offset));
    }
    softmax.row_max[h] = new_max;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int i = 4 * j + 2 * h + c;
        o[i] = o[i] * mine + exchange[i * 128] * theirs;
      }
    }
  }
  return true;
}

// Decode on the two-consumer kernel: when the tile's tokens all fit in one warpgroup's rows,
// both warpgroups take the same rows and split the blocks between them (even / odd steps), then
// combine (see combine_warpgroups). Otherwise each warpgroup owns its own tokens.
template <int kConsumers>
__device__ __forceinline__ bool warpgroups_share_rows(const AttentionParams& p, int num_tokens) {
  return kConsumers == 2 && num_tokens <= p.tokens_per_warpgroup;
}

// The bits [begin, end) of a 32-bit word, both clamped to [0, 32]; 0 when the range is empty.
__device__ __forceinline__ uint32_t bits_in_range(int begin, int end) {
  begin = max(begin, 0);
  end = min(end, 32);
  if (begin >= end) return 0u;
  const uint32_t below_end = end == 32 ? 0xffffffffu : (1u << end) - 1u;
  return below_end & ~((1u << begin) - 1u);
}

// A consumer warpgroup's Q rows into its buffer. Needs only the located tile (first row and
// token count), so warp planning runs it while warp 0 plans.
template <typename Element, int kConsumers>
__device__ __forceinline__ void load_tile_queries(const AttentionParams& p, const Smem& smem,
                                                  const TilePlan& plan, int kv_head,
                                                  int head_chunk) {
  const int warpgroup = threadIdx.x / 128 - 1;
  const int row_group = warpgroups_share_rows<kConsumers>(p, plan.num_tokens) ? 0 : warpgroup;
  load_queries<Element>(p, plan, smem.q(warpgroup), warpgroup, row_group, kv_head, head_chunk);
  FLASHMSA_MARK(kMarkQueriesLoaded);
}

// Runs after load_tile_queries and planning. kKv: converted formats' K and V stages are read
// once rewritten as q's dtype, by the converter warps (two consumers) or by all consumer threads
// (one consumer: kv_convert.cuh) once both landed, whether or not this warpgroup reads the
// block; kFp8TokenScaled also applies per-token scales (token_scales.cuh).
template <typename Element, bool kTemperatureLse, int kConsumers,
          KvFormat kKv = KvFormat::kNative>
__device__ inline void consume(const AttentionParams& p, const Smem& smem, const TilePlan& plan,
                        int kv_head, int head_chunk) {
  // Converted formats' stages are rewritten by the producer warpgroup's converter warps
  // (two consumers: producer_converts), whose converted barriers say when a stage is readable,
  // or by these warpgroups (one consumer: kv_convert.cuh).
  constexpr bool kProducerConverts = producer_converts(kConsumers, kKv, false);
  constexpr bool kConsumersConvert = is_converted(kKv) && !kProducerConverts;
  SmemHeader& header = smem.header();
  auto k_readable = [&](int stage) {
    return kProducerConverts ? &header.k_converted[stage] : &header.k_full[stage];
  };
  auto v_readable = [&](int stage) {
    return kProducerConverts ? &header.v_converted[stage] : &header.v_full[stage];
  };
  const int warpgroup = threadIdx.x / 128 - 1;
  const int thread = threadIdx.x % 128;
  const int lane = thread % 32;
  const bool share_rows = warpgroups_share_rows<kConsumers>(p, plan.num_tokens);
  const int row_group = share_rows ? 0 : warpgroup;

  // The two accumulator rows this thread holds (mma.cuh), and where they come from.
  int row_in_warpgroup[2];
  RowSource rows[2];
  int key_limit[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_in_warpgroup[h] = (thread / 32) * 16 + lane / 4 + 8 * h;
    rows[h] = row_source(p, plan, row_group, head_chunk, row_in_warpgroup[h]);
    key_limit[h] = rows[h].valid ? smem.token_key_limit()[rows[h].tile_token] : 0;
  }
  // Tile tokens this warpgroup owns, as a bit set over the planning masks' words: bits
  // [own_begin, own_end) formed word by word, not bit by bit (the per-bit loop, which the
  // compiler unrolled, was about 440 instructions that every CTA fetched cold once: about 2 us
  // of multi-token prediction's start).
  uint32_t own_tokens[kMaxMaskWords];
  const int own_begin = row_group * p.tokens_per_warpgroup;
  const int own_end = min(own_begin + p.tokens_per_warpgroup, plan.num_tokens);
#pragma unroll
  for (int w = 0; w < kMaxMaskWords; ++w) {
    own_tokens[w] = bits_in_range(own_begin - 32 * w, own_end - 32 * w);
  }

  uint8_t* q_smem = smem.q(warpgroup);
  const GlobalScales scales = global_scales(p);
  constexpr bool kTokenScales = has_token_scales(kKv);
  const TokenScaleRows token_scales = token_scale_rows(p, kv_head);
  OnlineSoftmax<kTemperatureLse> softmax;
  softmax.init();
  Accumulator o;
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;

  // One block at a time: S = Q K^T, release K, softmax, O += P V, release V. (Overlapping the
  // next block's Q K^T with this block's P V, as FlashAttention-3 does, measured slower here:
  // with two stages, holding V a step longer starves the producer.)
  const int num_stages = p.smem_layout.num_stages;
  RingCursor ring;
  for (int u = plan.slice_begin; u < plan.slice_end; ++u, ring.advance(num_stages)) {
    const int stage = ring.stage;
    const uint32_t phase = ring.phase;
    const uint32_t* selected_by = smem.token_mask(u);
    bool needed = false;
#pragma unroll
    for (int w = 0; w < kMaxMaskWords; ++w) {
      needed |= w < p.smem_layout.mask_words && (selected_by[w] & own_tokens[w]) != 0;
    }
    needed &= !share_rows || (u - plan.slice_begin) % 2 == warpgroup;
    mbarrier_wait(k_readable(stage), phase);
    FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstK);
    FLASHMSA_MARK_IF(u == plan.slice_end - 1, kMarkLastK);
    if constexpr (kConsumersConvert) {
      mbarrier_wait(&header.v_full[stage], phase);
      convert_block_by_consumers<Element, kConsumers>(smem.k(stage), smem.v(stage));
    }
    if (!needed) {
      // Arrive on both rings in order, without reading: keeps the barrier phases aligned (and a
      // stage is released only once it is readable: no load or rewrite of it is in flight).
      mbarrier_arrive(&header.k_empty[stage]);
      mbarrier_wait(v_readable(stage), phase);
      mbarrier_arrive(&header.v_empty[stage]);
      continue;
    }
    Accumulator s;
    issue_scores<Element>(smem_address(q_smem), smem_address(smem.k(stage)), s);

    // While the wgmma runs (the shared-memory reads are off the scores' chain): the keys of the
    // block each of this thread's rows sees. A warp's 16 rows are one token's heads (or a few
    // tokens' when a chunk has fewer than 16 heads), and a union block is mostly selected by one
    // of the warpgroup's tokens: a warp that sees none of the block's keys leaves its softmax
    // state and O as they are and gives P = 0, which is what the full update computes for such
    // rows, bit for bit (max and sums unchanged, correction 1, or 0 on an O that is still 0).
    // The wgmmas stay warpgroup-wide.
    const int block_first_key = smem.union_blocks()[u] * kBlockKeys;
    int visible[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int token = rows[h].tile_token;
      const bool selected = rows[h].valid && ((selected_by[token / 32] >> (token % 32)) & 1);
      visible[h] = selected ? min(max(key_limit[h] - block_first_key, 0), kBlockKeys) : 0;
    }
    const bool warp_reads = __any_sync(0xffffffffu, visible[0] > 0 || visible[1] > 0);
    // Per-token fp8 scales, staged beside the block (token_scales.cuh; they landed with it, and
    // K's are read before K's stage is released).
    const bool scales_keys = kTokenScales && token_scales.k.scales != nullptr;
    EarlyColumnScales early_key_scales;
    if (scales_keys) {
      early_key_scales = read_early_column_scales(smem.staged_token_scales(stage, false));
    }

    cute::warpgroup_wait<0>();
    fence_accumulator(s);
    FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstScores);
    if (scales_keys && warp_reads) {
      scale_columns_from_stage(s, smem.staged_token_scales(stage, false), early_key_scales);
    }
    mbarrier_arrive(&header.k_empty[stage]);

    uint32_t probabilities[32];
    if (warp_reads) {
      float correction[2];
      if constexpr (kTokenScales) {
        // V's scales land with V, on its full barrier: where the converter warps rewrite the
        // stages, nothing else on this path has waited for it yet.
        if (kProducerConverts && token_scales.v.scales != nullptr) {
          mbarrier_wait(&header.v_full[stage], phase);
        }
        softmax.template update<Element>(
            s, visible, scales.scale_log2, p.lse_temperature, probabilities, correction,
            [&](auto& probability) {
              if (token_scales.v.scales != nullptr) {
                scale_columns_from_stage(probability, smem.staged_token_scales(stage, true));
              }
            });
      } else {
        softmax.template update<Element>(s, visible, scales.scale_log2, p.lse_temperature,
                                         probabilities, correction);
      }
      // Once a row's max has settled its correction is exactly 1, and O * 1 is O: the warp
      // rescales only when one of its rows' max moved.
      if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {
        OnlineSoftmax<kTemperatureLse>::rescale(o, correction);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i) probabilities[i] = 0u;
    }
    FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstSoftmax);

    mbarrier_wait(v_readable(stage), phase);
    FLASHMSA_MARK_IF(u == plan.slice_begin, kMarkFirstV);
    if (plan.seqlen_k - block_first_key < kBlockKeys) {
      zero_value_tail(smem.v(stage), plan.seqlen_k - block_first_key, warpgroup);
    }
    issue_values<Element>(probabilities, smem_address(smem.v(stage)), o);
    cute::warpgroup_wait<0>();
    fence_accumulator(o);
    fence_fragment(probabilities);
    mbarrier_arrive(&header.v_empty[stage]);
  }

  FLASHMSA_MARK(kMarkLoopDone);
  // Epilogue. Rows that read nothing have sum 0: out = 0 exactly, lse = -inf. With a KV split
  // each CTA publishes its normalised partial output and LSEs in fp32, to its cluster
  // (cluster_reduce.cuh) or to the workspace for merge.cu.
  if (share_rows) {
    if (!combine_warpgroups(smem, warpgroup, softmax, o, p.lse_temperature)) return;
  }
  float lse[2], lse_t[2], sum[2], scale[2];
  softmax.finish(lse, lse_t, sum, p.lse_temperature);
#pragma unroll
  for (int h = 0; h < 2; ++h) scale[h] = sum[h] > 0.f ? scales.v_global_scale / sum[h] : 0.f;
  if (kConsumers == 1 && p.cluster_reduce) {
    publish_partial<kTemperatureLse>(smem, o, row_in_warpgroup, rows, scale, lse, lse_t);
    reduce_over_cluster<Element, kTemperatureLse>(p, smem, plan, kv_head, head_chunk);
    FLASHMSA_TIMELINE_RECORD();
    return;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!rows[h].valid) continue;
    const int64_t token = plan.first_row + rows[h].tile_token;
    const int64_t head = static_cast<int64_t>(kv_head) * p.group_size + rows[h].head;
    if (p.num_splits > 1) {
      const int64_t partial_row = workspace_partial_row(p, plan.split, token, head);
      store_partial_row<kTemperatureLse>(p.partial_out + partial_row * kHeadDim,
                                         p.partial_lse + partial_row,
                                         kTemperatureLse ? p.partial_lse_t + partial_row : nullptr,
                                         o, h, scale[h], lse[h], lse_t[h]);
      continue;
    }
    Element* out =
        static_cast<Element*>(p.output.out) + p.output.out_offset(token, head) + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      *reinterpret_cast<uint32_t*>(out + 8 * j) =
          MmaAtoms<Element>::pack(o[4 * j + 2 * h] * scale[h], o[4 * j + 2 * h + 1] * scale[h]);
    }
    if (lane % 4 == 0) {
      if (p.output.lse) p.output.lse[p.output.lse_offset(token, head)] = lse[h];
      if (kTemperatureLse) {
        p.output.lse_t[p.output.lse_t_offset(token, head)] = lse_t[h];
      }
    }
  }
  FLASHMSA_TIMELINE_RECORD();
}

}  // namespace flashmsa::sm90
