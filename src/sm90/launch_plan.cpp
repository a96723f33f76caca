// plan_launch (launch_plan.h): the Hopper launch of a call from its shapes and the device. The
// measurements behind each rule are quoted beside it (H200); the runs are in the commit
// history (docs/history.md).
#include "sm90/launch_plan.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "sm90/split_rules.h"

namespace flashmsa::sm90 {
namespace {

// A tuning field's value where it lies in [minimum, maximum], else the plan's own.
int32_t tuned(int32_t field, int32_t planned, int32_t minimum, int32_t maximum) {
  return field >= minimum && field <= maximum ? field : planned;
}

// The rows every request holds when they may all hold the same number (total_q = B x r: decode
// batches, multi-token prediction), else 0. The host cannot know that they do (cu_seqlens_q is
// on the device): the split count assumes it, and warp planning guesses tiles from it.
int64_t uniform_rows_per_request(const flashmsa_args& args) {
  return args.total_q % args.batch_size == 0 ? args.total_q / args.batch_size : 0;
}

// Tiles of at most 128 candidates plan in one warp: the one-consumer shape in entry order, the
// two-consumer kernel ascending, through a bitmap of the request's blocks (warp_planning.cuh),
// or through a sorting network where a request may have more blocks than the bitmap holds
// (5.7M keys: only the table's width or the flat cache's rows bound a request's length on the
// host).
int32_t warp_plan_kind(const flashmsa_args& args, const LaunchPlan& plan,
                       const flashmsa_tuning& tuning) {
  if (plan.tokens_per_tile * args.topk > kWarpPlanMaxEntries) return kWarpPlanNone;
  if (plan.num_consumer_warpgroups == 1) return kWarpPlanEntryOrder;
  const int64_t bitmap_blocks = int64_t{32} * kUnionBitmapMaxWords;
  const bool bitmap_holds_requests = args.is_paged
                                         ? args.max_pages_per_request <= bitmap_blocks
                                         : args.total_k <= bitmap_blocks * kBlockKeys;
  switch (tuned(tuning.warp_plan, 1, 0, 2)) {
    case 0: return kWarpPlanNone;
    case 2: return kWarpPlanSorted;
    default: return bitmap_holds_requests ? kWarpPlanBitmap : kWarpPlanSorted;
  }
}

// Shared memory: Q buffer(s), then the K and V rings with as many stages as fit, then the
// planning buffers and the barrier header.
SmemLayout smem_layout(const flashmsa_args& args, const LaunchPlan& plan,
                       const flashmsa_tuning& tuning) {
  auto align = [](uint32_t bytes, uint32_t to) { return (bytes + to - 1) / to * to; };
  SmemLayout layout{};
  const bool shared_q = plan.num_consumer_warpgroups == 1;
  const uint32_t q_bytes = 2 * kQPanelBytes;
  layout.q[0] = 0;
  layout.q[1] = shared_q ? 0 : q_bytes;
  const uint32_t q_end = shared_q ? q_bytes : 2 * q_bytes;
  const uint32_t splits = static_cast<uint32_t>(plan.num_splits);
  layout.push_slot_bytes = push_slot_bytes(splits);
  layout.push_slot_rows = static_cast<int32_t>(push_slot_rows(splits));
  const uint32_t received_bytes = plan.push_reduce ? receive_buffer_bytes(splits) : 0;
  layout.received = q_end;
  const uint32_t rings_begin = align(q_end + received_bytes, 1024);
  const uint32_t tokens = static_cast<uint32_t>(plan.tokens_per_tile);
  const uint32_t candidates = tokens * static_cast<uint32_t>(args.topk);
  layout.mask_words = static_cast<int32_t>((tokens + 31) / 32);
  const uint32_t warp_scratch_bytes =
      warp_plan_kind(args, plan, tuning) != kWarpPlanNone && !plan.decode_kernel
          ? kWarpScratchBytes
          : 0;
  const uint32_t planning_bytes =
      align(candidates * 4, 16) * 2 + align(candidates * layout.mask_words * 4, 16) +
      align(tokens * 4, 16) * 2 + warp_scratch_bytes + align(sizeof(SmemHeader), 16);
  // K and V of one block, and with per-token fp8 scales theirs (2 x kStagedScaleFloats), staged
  // beside the block by a warp of the producer side in every kernel.
  const bool token_scales = args.kv_dtype == FLASHMSA_DTYPE_FP8_E4M3 &&
                            (args.k_token_scale != nullptr || args.v_token_scale != nullptr);
  // The token-warp kernel and the decode kernel read fp8 and NVFP4 stages where they land:
  // compact slots of one box. At two CTAs per SM the decode kernel's fp8 rings then hold two
  // blocks in the bytes of one (128 KiB in flight per SM, as bf16's one stage), its NVFP4 rings
  // four (with their staged scales).
  const bool nvfp4 = args.kv_dtype == FLASHMSA_DTYPE_NVFP4;
  const bool converted = args.kv_dtype != args.q_dtype;
  const uint32_t box_bytes = nvfp4 ? kNvfp4TileBytes : kFp8TileBytes;
  const bool compact = plan.token_warps || (plan.decode_kernel && converted);
  const uint32_t slot_bytes = compact ? box_bytes : kKvTileBytes;
  // The NVFP4 union tile (producer_converts): full stages that the converter warps write, and
  // a raw ring of compact stages, each with its staged block scales, where the boxes land.
  const bool raw_ring = nvfp4 && !compact;
  // NVFP4's block scales, staged beside the block (beside the raw stage in the union tile) by
  // the producers of every kernel that reads it.
  const uint32_t scale_bytes = token_scales ? 2 * kStagedScaleFloats * sizeof(float)
                               : nvfp4      ? 2 * kNvfp4ScaleTileBytes
                                            : 0;
  const uint32_t raw_stage_bytes = raw_ring ? 2 * kNvfp4TileBytes + scale_bytes : 0;
  const uint32_t stage_bytes = 2 * slot_bytes + (raw_ring ? 0 : scale_bytes);
  // Two CTAs per SM share its 228 KiB, less 1 KiB the system reserves per CTA.
  const uint32_t budget = plan.ctas_per_sm == 1 ? kSharedMemoryLimit : kTwoCtasPerSmSharedBytes;
  const uint32_t available = budget - kSharedMemoryAlignmentSlack;
  // Compact rings hold twice the blocks in the same bytes: the token-warp kernel's warps run
  // on the blocks their own tokens chose, so more resident blocks keep more of them busy.
  const uint32_t most_stages =
      plan.num_consumer_warpgroups == 2
          ? tuned(tuning.prefill_stages, plan.token_warps ? kMaxStages : kPrefillMaxStages, 2,
                  kMaxStages)
          : tuned(tuning.stages, kMaxStages, 1, kMaxStages);
  const uint32_t fixed_bytes = rings_begin + planning_bytes;
  const uint32_t ring_bytes = available > fixed_bytes ? available - fixed_bytes : 0;
  layout.num_stages =
      static_cast<int32_t>(std::min<uint32_t>(most_stages, ring_bytes / stage_bytes));
  // The raw ring takes what the full stages leave, up to kMaxStages.
  const uint32_t raw_bytes = ring_bytes - std::min(ring_bytes, layout.num_stages * stage_bytes);
  layout.raw_stages = raw_ring ? static_cast<int32_t>(std::min<uint32_t>(
                                     kMaxStages, raw_bytes / raw_stage_bytes))
                               : 0;
  layout.k = rings_begin;
  layout.v = layout.k + layout.num_stages * slot_bytes;
  uint32_t offset = layout.v + layout.num_stages * slot_bytes;
  layout.raw_k = raw_ring ? offset : 0;
  layout.raw_v = raw_ring ? offset + layout.raw_stages * kNvfp4TileBytes : 0;
  if (raw_ring) offset += 2 * layout.raw_stages * kNvfp4TileBytes;
  layout.token_scales = offset;
  offset += (raw_ring ? layout.raw_stages : layout.num_stages) * scale_bytes;
  layout.union_blocks = offset;
  offset += align(candidates * 4, 16);
  layout.union_coords = offset;
  offset += align(candidates * 4, 16);
  layout.token_masks = offset;
  offset += align(candidates * layout.mask_words * 4, 16);
  layout.token_key_limit = offset;
  offset += align(tokens * 4, 16);
  layout.token_first_negative = offset;
  offset += align(tokens * 4, 16);
  layout.warp_scratch = offset;
  offset += warp_scratch_bytes;
  layout.header = offset;
  layout.bytes = offset + align(sizeof(SmemHeader), 16);
  return layout;
}

WorkspaceLayout workspace_layout(const flashmsa_args& args, const LaunchPlan& plan) {
  WorkspaceLayout layout;
  if (!plan.merges_in_workspace()) return layout;
  auto align = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t rows = static_cast<size_t>(plan.num_splits) * args.total_q * args.num_qo_heads;
  layout.partial_out = 0;
  layout.partial_lse = align(rows * kHeadDim * sizeof(float));
  layout.partial_lse_t = layout.partial_lse + align(rows * sizeof(float));
  layout.bytes = layout.partial_lse_t + align(rows * sizeof(float));
  return layout;
}

}  // namespace

flashmsa_tuning default_tuning() {
  flashmsa_tuning tuning;
  flashmsa_tuning_init(&tuning);
  return tuning;
}

LaunchPlan plan_launch(const flashmsa_args& args, const DeviceProperties& device,
                       const flashmsa_tuning& tuning) {
  LaunchPlan c;
  if (args.total_q == 0 || args.batch_size == 0) {
    c.empty = true;
    return c;
  }
  // Rows and tile counts of a request are int32 in the kernels (cu_seqlens_q is int32).
  if (args.total_q > INT32_MAX - 256) {
    fail_not_supported("q: the CUDA kernels take at most 2^31 - 257 query rows a call, got " +
                       std::to_string(args.total_q));
  }
  const int32_t group_size = static_cast<int32_t>(args.num_qo_heads / args.num_kv_heads);
  const int32_t topk = static_cast<int32_t>(args.topk);
  // Rows of a warpgroup: whole tokens' head groups (or 64-head chunks of a wider group), and
  // few enough tokens that a tile's tokens x topk candidates fit the planning buffers.
  c.heads_per_chunk = std::min(group_size, kRowsPerWarpgroup);
  c.num_head_chunks = (group_size + c.heads_per_chunk - 1) / c.heads_per_chunk;
  // Calls of at most one warpgroup's tokens per request on average run the one-consumer shape,
  // two CTAs per SM, with tiles of one warpgroup's tokens.
  const int32_t rows_tokens = kRowsPerWarpgroup / c.heads_per_chunk;
  const int64_t sms = device.multiprocessors;
  // At most 16 heads per KV head and 32 index entries per row: the decode kernel, whose tiles
  // are single rows, for decode batches and for multi-token prediction whose rows fit one CTA
  // per SM (split_rules.h); with converted K/V formats (fp8, NVFP4) for every call of at most
  // 8 rows a request (mode 2). Their other kernels convert each block for 16 rows at a time
  // (token warps) or rewrite it through shared memory (the union tile), and are bound by that,
  // where the decode kernel's four warps convert a row's blocks between them, two CTAs an SM.
  // Multi-token prediction, 8 tokens a request, the decode suite's rows (H200, one call):
  // fp8 batch 32 on KV 32768 130.7 us against 260.8, 0.39-0.80x the time from 4000 keys a
  // request on, at 1000 keys 0.70x at batch 8 and 1.03-1.10x at 32-128 (8 blocks: the 8 rows'
  // unions are nearly one); NVFP4 182.6 against 619.2 us, 0.26-0.57x, at 1000 keys 0.67x and
  // 1.07-1.11x. q's dtype keeps the rule (mode 2 took 1.16x the time at batch 32, up to 2.5x
  // on the suite).
  const bool converts_kv = args.kv_dtype != args.q_dtype;
  const bool decode_shape = args.total_q <= INT32_MAX && group_size <= kDecodeRows && topk <= 32;
  c.decode_kernel = takes_one_token_kernel(decode_shape, args.total_q, args.batch_size,
                                           args.num_kv_heads, sms,
                                           tuned(tuning.decode_kernel, converts_kv ? 2 : 1, 0, 2));
  // NVFP4 K/V run only the decode kernel and the two-consumer kernel (its converter warps
  // rewrite the stages for the union tile, or its token warps convert in registers), so the
  // one-consumer shape only as the decode kernel.
  const bool nvfp4 = args.kv_dtype == FLASHMSA_DTYPE_NVFP4;
  const bool one_consumer =
      c.decode_kernel || (!nvfp4 && (args.total_q <= args.batch_size * rows_tokens ||
                                     tuned(tuning.one_consumer, 0, 0, 1) == 1));
  c.num_consumer_warpgroups = one_consumer ? 1 : 2;
  c.ctas_per_sm = one_consumer ? 2 : 1;
  c.tokens_per_warpgroup =
      std::min(rows_tokens, kMaxCandidates / (c.num_consumer_warpgroups * topk));
  if (c.decode_kernel) c.tokens_per_warpgroup = 1;
  c.tokens_per_tile = c.num_consumer_warpgroups * c.tokens_per_warpgroup;
  // The one-consumer shape shares its SM with a second CTA: where a tile of that many tokens
  // leaves no room for one K and V stage beside its planning buffers (groups of one head at
  // topk 32: 64 tokens, 2048 candidates of two mask words each), its tiles take fewer tokens.
  while (one_consumer && c.tokens_per_warpgroup > 1 &&
         smem_layout(args, c, tuning).num_stages < 1) {
    c.tokens_per_warpgroup /= 2;
    c.tokens_per_tile = c.tokens_per_warpgroup;
  }
  // Tiles never straddle requests, so there are at most ceil(total_q / T) + B of them, plus two
  // for rows outside every request (they get zeros); CTAs past the real count (known only on
  // the device) exit after planning. The decode kernel's tiles are the rows themselves.
  const int64_t query_tiles = (args.total_q + c.tokens_per_tile - 1) / c.tokens_per_tile;
  c.max_tiles = c.decode_kernel ? args.total_q : query_tiles + args.batch_size + 2;
  const int64_t uniform_rows = uniform_rows_per_request(args);
  c.uniform_rows = args.total_q <= INT32_MAX ? static_cast<int32_t>(uniform_rows) : 0;

  // Few (tile, head) units for the machine's CTA slots: split each tile's blocks over
  // num_splits CTAs (at least one block each) and merge the partials; not when the grid is
  // already (nearly) full. The units are counted as the call most likely has them: where every
  // request may hold the same number of rows r they most likely do, and then there are
  // B x ceil(r / T) tiles, where the grid's bound (ceil(total_q / T) + B, each tile at least one
  // token) is up to twice that. The split count only sets the speed. Measured (H200,
  // two-consumer kernel, 8 tokens a request): batch 4 8 splits 48.4 us (the bound's 4: 57.6),
  // batch 8 4 splits 73.5 (2: 93.3), batch 12 2 splits 106.9 (1: 161.0), batch 16 2 splits 128.1
  // (1: 162.5).
  const int64_t tokens_per_request = std::max<int64_t>(1, args.total_q / args.batch_size);
  const int64_t likely_tiles =
      uniform_rows > 0 ? args.batch_size * ((uniform_rows + c.tokens_per_tile - 1) /
                                            c.tokens_per_tile)
                       : std::min(query_tiles + args.batch_size, args.total_q);
  const int64_t units = likely_tiles * args.num_kv_heads * c.num_head_chunks;
  const int64_t slots = sms * c.ctas_per_sm;
  const int64_t max_union = std::min<int64_t>(c.tokens_per_tile, tokens_per_request) * topk;
  // The most splits a launch can run: one block each, the merge kernel's limit, and for the
  // one-consumer shape, which combines its splits inside a thread-block cluster (no merge
  // kernel, no workspace), the largest cluster Hopper allows.
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(max_union, kMaxMergeSplits));
  const int32_t most_splits =
      static_cast<int32_t>(one_consumer ? std::min<int64_t>(kMaxClusterSplits, most) : most);
  // An extra split costs more than it gains once the grid holds about one CTA per slot
  // (batch 64: 1 split 75-79 us, 2 splits 85 us). The rule stops at 16 for the two-consumer
  // kernel too: its splits each plan their tile's whole union block-wide (about 10 us at 8
  // tokens a request), so splits past 16 add CTAs that mostly plan (batch 1, 8 tokens a
  // request: 16 splits 28.3 us, 33 splits 34.5).
  constexpr int64_t kMostChosenSplits = 16;
  c.num_splits = 1;
  if (units > 0 && units * 10 < slots * 9) {
    c.num_splits = static_cast<int32_t>(std::clamp<int64_t>(
        slots / units, 1, std::min<int64_t>(most_splits, kMostChosenSplits)));
  }
  // Prefill calls of one to two waves whose requests span several tiles (split_rules.h).
  if (!one_consumer && !c.decode_kernel && c.num_splits == 1 &&
      tokens_per_request > c.tokens_per_tile) {
    const int64_t request_blocks =
        args.is_paged ? args.max_pages_per_request : (args.total_k + kBlockKeys - 1) / kBlockKeys;
    c.num_splits = short_prefill_splits(units, slots, request_blocks, most_splits);
  }
  // All of a one-consumer call's clusters must be resident at once: a second wave pays planning
  // and a whole slice again (batch 16 with clusters of 4 took 38 us, of 2 27.6 us). The check
  // sizes shared memory without the push reduction's receive buffer, decided below.
  auto clusters_resident = [&](const LaunchPlan& plan) {
    if (plan.num_splits <= 1) return true;
    const uint32_t shared_bytes =
        smem_layout(args, plan, tuning).bytes + kSharedMemoryAlignmentSlack;
    const int clusters = device.max_active_clusters
                             ? device.max_active_clusters(plan.decode_kernel, shared_bytes,
                                                          plan.num_splits)
                             : 0;
    return clusters >= units;
  };
  if (one_consumer) {
    while (!clusters_resident(c)) --c.num_splits;
    // Where the units fit one CTA per SM, take the most splits that still do: more splits
    // measured slower, although two CTAs per SM would hold them (decode kernel: batch 8 4
    // splits 13.3-14.0 us (8: 17.5), batch 16 2 splits 21.3-22.7 (4: 25.7), batch 32 1 split
    // 39.4 (2: 42.3)).
    const int64_t splits_one_cta_per_sm = units > 0 ? sms / units : 0;
    if (splits_one_cta_per_sm >= 1) {
      c.num_splits = static_cast<int32_t>(std::min<int64_t>(c.num_splits, splits_one_cta_per_sm));
    }
    // The decode kernel gives each split at least two blocks, so that a CTA's second block
    // streams while its first is computed, unless splits of one block each take at most half
    // the SMs: then each has an SM to itself and the next call's CTAs launch on the other half
    // and wait there (programmatic dependent launch). Measured: batch 1 16 splits 6.0 us, 8
    // splits 6.3; batch 2 16 splits 8.2, 8 splits 7.3; batch 3 11 splits 9.4, 8 splits 8.0.
    const bool one_block_splits_fit_half_the_sms =
        units * std::min<int64_t>(c.num_splits, max_union) * 2 <= sms;
    if (c.decode_kernel && !one_block_splits_fit_half_the_sms) {
      c.num_splits = static_cast<int32_t>(
          std::min<int64_t>(c.num_splits, std::max<int64_t>(1, max_union / 2)));
    }
    // Short decode splits leave some SMs free (split_rules.h).
    if (c.decode_kernel) c.num_splits = short_one_token_splits(units, sms, max_union, c.num_splits);
  }
  c.num_splits = tuned(tuning.splits, c.num_splits, 1, most_splits);
  // The grid's likely CTAs fit one per SM: one wave even at one CTA per SM.
  const bool fits_one_cta_per_sm = units * c.num_splits <= sms;
  // One-consumer grids run two CTAs per SM of one K and one V stage each, also where the grid
  // has no more CTAs than the machine has SMs. One CTA per SM with three stages there (the deep
  // pipeline, tuning.deep_pipeline) keeps the next blocks in flight while a block is computed,
  // but past 64 KiB in flight the SMs' shares of the DRAM bandwidth turn unequal (36 against
  // 47-49 GB/s), and a call ends with its slowest split: batch 16 19.9 us against 21.2-22.9
  // with the deep pipeline, batch 32 35.5 against 37.2-39.8, batch 2 6.6 against 7.0.
  const bool splits_hold_one_block = max_union <= c.num_splits;
  if (one_consumer && fits_one_cta_per_sm && !splits_hold_one_block &&
      tuned(tuning.deep_pipeline, 0, 0, 1) != 0) {
    c.ctas_per_sm = 1;
    if (!clusters_resident(c)) c.ctas_per_sm = 2;
  }
  // tuning.ctas_per_sm = 1: the deep pipeline for any one-consumer grid, in as many waves as it
  // takes.
  if (one_consumer && tuned(tuning.ctas_per_sm, 0, 1, 2) == 1) c.ctas_per_sm = 1;
  // tuning.cluster = 0: one-consumer splits are independent CTAs whose partials the merge
  // kernel combines from the workspace.
  c.cluster_reduce = one_consumer && c.num_splits > 1 && tuned(tuning.cluster, 1, 0, 1) != 0;
  // The receive buffer ((splits - 1) x ceil(16 / splits) rows, at most 14.2 KiB) fits beside
  // the stages at one CTA per SM, and beside the one stage at two per SM for the decode kernel,
  // which has no warp planning scratch (kernel_traits.h asserts it).
  const bool receive_buffer_fits = c.ctas_per_sm == 1 || c.decode_kernel;
  c.push_reduce = c.cluster_reduce && receive_buffer_fits && c.heads_per_chunk <= kDecodeRows &&
                  tuned(tuning.push, 1, 0, 1) != 0;
  // Multi-token prediction (every request's rows one two-consumer tile) streams whole unions at
  // one CTA per SM through rings of two stages, 128 KiB in flight per SM, where the SMs' shares
  // of the DRAM bandwidth turn unequal; where the grid is one wave, the call ends with its
  // slowest CTA. The producer there issues a block's K only once the previous block's V has
  // landed (throttle 2: 64 KiB in flight). Grids of several waves balance themselves and only
  // lose by it (batch 32: 218.6-220.0 us against 219.7-220.9; decode-suite rows at batch 8 and
  // 32 1-2% faster, at batch 64 and 128 up to 1.7% slower). Prefill tiles stay unthrottled.
  const bool one_tile_per_request = uniform_rows > 0 && uniform_rows <= c.tokens_per_tile;
  const int32_t planned_throttle =
      !one_consumer && one_tile_per_request && fits_one_cta_per_sm ? 2 : 0;
  c.tiles_outer = tuned(tuning.tiles_outer, one_consumer, 0, 1) != 0;
  // K/V loads evict first where a call reads each block once per (request, KV head): the
  // one-consumer shape, and multi-token prediction, whose requests are one tile each
  // (batch 32: 215.8 us against 217.3-217.8). Prefill's neighbouring tiles of a head share
  // blocks and keep them in L2.
  c.kv_evict_first = tuned(tuning.evict_first, one_consumer || one_tile_per_request, 0, 1) != 0;
  // No L2 promotion of the K/V boxes. A box is 128 rows of 128 bytes, one 64-dim half of each
  // key's 256-byte row, and both halves of a block are loaded back to back, so promotion to 256
  // bytes fetches nothing a box does not read anyway; yet it slows the reads of random 32 KiB
  // blocks by 7% (batch 64 71.2 -> 67.9 us without it, batch 128 134.6 -> 128.8, multi-token
  // prediction 212.5 -> 197.0; prefill unchanged).
  c.kv_l2_promotion = static_cast<L2Promotion>(tuned(tuning.l2_promotion, 0, 0, 2));

  c.warp_planning = warp_plan_kind(args, c, tuning);
  // The speculative load (warp_planning.cuh) issues q's-dtype boxes: fp8 calls go without it.
  c.speculate_first_block = !converts_kv && tuned(tuning.speculate, 1, 0, 1) != 0;
  // fp8 K/V (with or without per-token scales) in the two-consumer kernel: each warp computes
  // its own rows' blocks, converting K and V in registers (token_warp_consumer.cuh), against the
  // union tile that rewrites every block and computes it for a warpgroup's 64 rows. Measured
  // against the union tile: every production case (18K-174K keys) 1.02-1.26x its speed, M3 on
  // 32K keys 1.13x (`random`), 1.00x (`indexer`), 0.86x (`clustered`), on 8K keys 0.82-0.87x,
  // multi-token prediction on 32K keys in 0.86x the time. The union's waste grows with the keys
  // a request holds, but the host knows them only for paged calls (the page table's width) and
  // a flat call would then take another kernel than the same call paged (other bits); so every
  // such call takes token warps.
  // NVFP4 takes the union tile, whose full stages the producer warpgroup's converter warps
  // write from a raw ring while the consumers compute (producer_converts), unless the override
  // asks for token warps.
  c.token_warps = c.num_consumer_warpgroups == 2 && !c.decode_kernel && converts_kv &&
                  tuned(tuning.token_warps, nvfp4 ? 0 : 1, 0, 1) == 1;
  c.smem = smem_layout(args, c, tuning);
  // The NVFP4 union tile's loads need a raw stage beside its two full ones; tiles whose
  // planning buffers leave no room for one (group size 1: 128 tokens a tile) take token warps.
  // The rule reads only the group size and topk, so a flat call and its paged twin agree.
  if (nvfp4 && c.num_consumer_warpgroups == 2 && !c.decode_kernel && !c.token_warps &&
      c.smem.raw_stages < 1) {
    c.token_warps = true;
    c.smem = smem_layout(args, c, tuning);
  }
  // The two-consumer kernel exchanges warpgroup state through two K stages (consumer.cuh).
  if (c.smem.num_stages < (c.num_consumer_warpgroups == 2 ? 2 : 1)) {
    throw Error(FLASHMSA_ERROR_INTERNAL, "shared memory plan has too few stages");
  }
  // Rings of one stage serialise their loads already (and the throttle's wait needs two).
  c.inflight_throttle =
      c.smem.num_stages >= 2 ? tuned(tuning.throttle, planned_throttle, 0, 2) : 0;
  // Pacing (pacing.cuh) where the throttle's rule holds (grids of one wave, whose call ends
  // with its slowest CTA): a CTA with more blocks left than the running CTAs' mean loads
  // unthrottled (batch 32 213.2 us against 215.2-215.7, 24 165.1 against 170.6, 16 114.9
  // against 118.4; slacks of -0.5 to -2 blocks were slower, +0.5 the same).
  // Measured for q's-dtype K/V only; fp8 calls go without it (the producer compiles none of
  // it for them).
  c.pacing_slack = planned_throttle > 0 && !converts_kv
                       ? tuned(tuning.pace, kPacingSlackZero, 0, 17)
                       : 0;
  c.workspace = workspace_layout(args, c);

  const int64_t columns = args.num_kv_heads * c.num_head_chunks;
  c.grid_ctas = c.max_tiles * columns * c.num_splits;
  if (c.grid_ctas > INT32_MAX) {
    fail_not_supported("problem too large for one launch: " + std::to_string(c.max_tiles) +
                       " query tiles x " + std::to_string(columns) + " head columns x " +
                       std::to_string(c.num_splits) + " splits");
  }
  return c;
}

}  // namespace flashmsa::sm90
