// The Hopper launch plan (src/sm90/launch_plan.h) from shapes alone, on a modelled H200: which
// kernel each kind of call takes (decode batches, multi-token prediction, prefill, small and
// large GQA groups, topk 1 and 64), its splits and how they combine, its L2 policy and
// pipeline, the workspace it needs, the test-only overrides, and invariants over a sweep.
#include <gtest/gtest.h>
#include <stdint.h>

#include <string>
#include <utility>

#include "common/error.h"
#include "flashmsa/flashmsa.h"
#include "flashmsa/flashmsa_testing.h"
#include "sm90/launch_plan.h"

namespace {

using flashmsa::sm90::DeviceProperties;
using flashmsa::sm90::L2Promotion;
using flashmsa::sm90::LaunchPlan;
using flashmsa::sm90::plan_launch;
namespace sm90 = flashmsa::sm90;

constexpr int kH200Sms = 132;

// An H200 without the GPC limit on cluster placement: as many clusters as the CTAs that fit
// (two per SM at most, fewer when shared memory says so) divided by the cluster size.
DeviceProperties h200() {
  DeviceProperties device;
  device.multiprocessors = kH200Sms;
  device.max_active_clusters = [](bool, uint32_t shared_bytes, int cluster_size) {
    const int per_sm = std::min<int>(2, (228 * 1024) / (shared_bytes + 1024));
    return kH200Sms * per_sm / cluster_size;
  };
  return device;
}

struct Shape {
  int64_t batch, rows_per_request, num_qo_heads, num_kv_heads, topk, kv_len;
  bool paged = true;
};

flashmsa_args args_of(const Shape& s) {
  flashmsa_args args;
  flashmsa_args_init(&args);
  args.device = FLASHMSA_DEVICE_CUDA;
  args.batch_size = s.batch;
  args.total_q = s.batch * s.rows_per_request;
  args.num_qo_heads = s.num_qo_heads;
  args.num_kv_heads = s.num_kv_heads;
  args.head_dim = 128;
  args.topk = s.topk;
  args.is_paged = s.paged ? 1 : 0;
  const int64_t pages_per_request = (s.kv_len + 127) / 128;
  if (s.paged) {
    args.num_pages = s.batch * pages_per_request;
    args.max_pages_per_request = pages_per_request;
  } else {
    args.total_k = s.batch * s.kv_len;
  }
  args.causal = 1;
  return args;
}

LaunchPlan plan_of(const Shape& s, const flashmsa_tuning& tuning = sm90::default_tuning()) {
  return plan_launch(args_of(s), h200(), tuning);
}

std::string name(const Shape& s) {
  return "batch " + std::to_string(s.batch) + " x " + std::to_string(s.rows_per_request) +
         " rows, Hq " + std::to_string(s.num_qo_heads) + " / Hkv " +
         std::to_string(s.num_kv_heads) + ", topk " + std::to_string(s.topk) + ", KV " +
         std::to_string(s.kv_len);
}

constexpr Shape kDecodeBatch1{1, 1, 64, 4, 16, 32768};
constexpr Shape kDecodeBatch16{16, 1, 64, 4, 16, 32768};
constexpr Shape kDecodeBatch64{64, 1, 64, 4, 16, 32768};
constexpr Shape kMtpBatch32{32, 8, 64, 4, 16, 32768};
constexpr Shape kPrefill32K{1, 32768, 64, 4, 16, 32768, false};

TEST(LaunchPlan, DecodeBatchOneSplitsSixteenWaysInOneCluster) {
  const LaunchPlan plan = plan_of(kDecodeBatch1);
  EXPECT_TRUE(plan.decode_kernel);
  EXPECT_EQ(plan.num_consumer_warpgroups, 1);
  EXPECT_EQ(plan.ctas_per_sm, 2);
  EXPECT_EQ(plan.tokens_per_tile, 1);
  EXPECT_EQ(plan.max_tiles, 1);
  EXPECT_EQ(plan.num_splits, 16);  // one block per CTA: 64 CTAs take under half the SMs
  EXPECT_TRUE(plan.cluster_reduce);
  EXPECT_TRUE(plan.push_reduce);
  EXPECT_FALSE(plan.merges_in_workspace());
  EXPECT_EQ(plan.workspace.bytes, 0u);
  EXPECT_TRUE(plan.kv_evict_first);
  EXPECT_TRUE(plan.tiles_outer);
  EXPECT_EQ(plan.kv_l2_promotion, L2Promotion::kNone);
  EXPECT_EQ(plan.smem.num_stages, 1);
  EXPECT_EQ(plan.grid_ctas, 1 * 4 * 16);
}

TEST(LaunchPlan, DecodeBatchSixteenTakesTwoSplitsOfEightBlocks) {
  const LaunchPlan plan = plan_of(kDecodeBatch16);
  EXPECT_TRUE(plan.decode_kernel);
  EXPECT_EQ(plan.num_splits, 2);
  EXPECT_TRUE(plan.cluster_reduce);
  EXPECT_EQ(plan.grid_ctas, 16 * 4 * 2);
}

TEST(LaunchPlan, DecodeBatchSixtyFourFillsTheMachineWithoutSplits) {
  const LaunchPlan plan = plan_of(kDecodeBatch64);
  EXPECT_TRUE(plan.decode_kernel);
  EXPECT_EQ(plan.num_splits, 1);
  EXPECT_FALSE(plan.cluster_reduce);
  EXPECT_FALSE(plan.push_reduce);
  EXPECT_EQ(plan.grid_ctas, 64 * 4);
}

TEST(LaunchPlan, MultiTokenPredictionIsOneThrottledTwoConsumerTileARequest) {
  const LaunchPlan plan = plan_of(kMtpBatch32);
  EXPECT_FALSE(plan.decode_kernel);  // 256 rows x 4 KV heads do not fit one CTA per SM
  EXPECT_EQ(plan.num_consumer_warpgroups, 2);
  EXPECT_EQ(plan.tokens_per_tile, 8);
  EXPECT_EQ(plan.uniform_rows, 8);
  EXPECT_EQ(plan.num_splits, 1);
  EXPECT_EQ(plan.inflight_throttle, 2);
  EXPECT_EQ(plan.pacing_slack, sm90::kPacingSlackZero);
  EXPECT_TRUE(plan.kv_evict_first);
  EXPECT_EQ(plan.smem.num_stages, 2);
}

TEST(LaunchPlan, MultiTokenPredictionOfFewRequestsTakesTheDecodeKernel) {
  // 4 requests x 8 rows x 4 KV heads = 128 CTAs fit one per SM.
  const LaunchPlan plan = plan_of({4, 8, 64, 4, 16, 32768});
  EXPECT_TRUE(plan.decode_kernel);
  EXPECT_EQ(plan.max_tiles, 32);
}

TEST(LaunchPlan, PrefillIsTwoConsumerTilesOfEightTokensWithoutSplits) {
  const LaunchPlan plan = plan_of(kPrefill32K);
  EXPECT_FALSE(plan.decode_kernel);
  EXPECT_EQ(plan.num_consumer_warpgroups, 2);
  EXPECT_EQ(plan.ctas_per_sm, 1);
  EXPECT_EQ(plan.heads_per_chunk, 16);
  EXPECT_EQ(plan.tokens_per_warpgroup, 4);
  EXPECT_EQ(plan.tokens_per_tile, 8);
  EXPECT_EQ(plan.max_tiles, 32768 / 8 + 1 + 2);
  EXPECT_EQ(plan.num_splits, 1);
  EXPECT_FALSE(plan.kv_evict_first);  // neighbouring tiles share blocks in L2
  EXPECT_FALSE(plan.tiles_outer);
  EXPECT_EQ(plan.inflight_throttle, 0);
  EXPECT_EQ(plan.pacing_slack, 0);
  EXPECT_EQ(plan.smem.num_stages, sm90::kPrefillMaxStages);
  EXPECT_EQ(plan.warp_planning, sm90::kWarpPlanBitmap);  // 128 candidates, 32K keys
  EXPECT_EQ(plan.workspace.bytes, 0u);
}

// The kernel, its tile and its grid are those of `base`.
void expect_same_kernel_and_grid(const LaunchPlan& plan, const LaunchPlan& base) {
  EXPECT_EQ(plan.decode_kernel, base.decode_kernel);
  EXPECT_EQ(plan.num_consumer_warpgroups, base.num_consumer_warpgroups);
  EXPECT_EQ(plan.tokens_per_tile, base.tokens_per_tile);
  EXPECT_EQ(plan.num_splits, base.num_splits);
  EXPECT_EQ(plan.smem.num_stages, base.smem.num_stages);
  EXPECT_EQ(plan.grid_ctas, base.grid_ctas);
}

// fp8 K/V take the same kernels and shapes as bf16, without the speculative first block (it
// would land outside the rings' barriers) or pacing; everything but the stages is bf16's plan.
TEST(LaunchPlan, Fp8KvKeepsTheShapesWithoutSpeculationOrPacing) {
  for (const Shape& shape : {kDecodeBatch1, kDecodeBatch16, kDecodeBatch64, kPrefill32K}) {
    flashmsa_args bf16 = args_of(shape);
    flashmsa_args fp8 = bf16;
    fp8.kv_dtype = FLASHMSA_DTYPE_FP8_E4M3;
    const LaunchPlan native = plan_launch(bf16, h200(), sm90::default_tuning());
    const LaunchPlan plan = plan_launch(fp8, h200(), sm90::default_tuning());
    SCOPED_TRACE(name(shape));
    EXPECT_FALSE(native.token_warps);
    // The token-warp kernel's compact rings hold twice the stages (tested below), and so do
    // the decode kernel's: two 16 KiB slots where bf16's one stage of 32 KiB an operand fits.
    if (plan.token_warps || plan.decode_kernel) {
      EXPECT_EQ(plan.smem.num_stages, 2 * native.smem.num_stages);
      EXPECT_EQ(plan.smem.v, plan.smem.k + plan.smem.num_stages * sm90::kFp8TileBytes);
    } else {
      EXPECT_EQ(plan.smem.num_stages, native.smem.num_stages);
    }
    EXPECT_EQ(plan.decode_kernel, native.decode_kernel);
    EXPECT_EQ(plan.num_consumer_warpgroups, native.num_consumer_warpgroups);
    EXPECT_EQ(plan.tokens_per_tile, native.tokens_per_tile);
    EXPECT_EQ(plan.num_splits, native.num_splits);
    EXPECT_EQ(plan.grid_ctas, native.grid_ctas);
    EXPECT_EQ(plan.cluster_reduce, native.cluster_reduce);
    EXPECT_EQ(plan.inflight_throttle, native.inflight_throttle);
    EXPECT_FALSE(plan.speculate_first_block);
    EXPECT_EQ(plan.pacing_slack, 0);
  }
  EXPECT_TRUE(plan_of(kPrefill32K).speculate_first_block);
}

// Multi-token prediction (at most 8 rows a request) of converted K/V takes the decode kernel,
// one CTA a row, at any batch; q's dtype keeps the two-consumer kernel (paced) past the rows
// that fit one CTA per SM, and calls of more rows a request keep the prefill kernels.
TEST(LaunchPlan, ConvertedKvTakeTheDecodeKernelForMultiTokenPrediction) {
  const LaunchPlan native = plan_of(kMtpBatch32);
  EXPECT_FALSE(native.decode_kernel);
  EXPECT_EQ(native.num_consumer_warpgroups, 2);
  EXPECT_EQ(native.pacing_slack, sm90::kPacingSlackZero);
  for (const flashmsa_dtype kv_dtype : {FLASHMSA_DTYPE_FP8_E4M3, FLASHMSA_DTYPE_NVFP4}) {
    SCOPED_TRACE(kv_dtype);
    for (const Shape& shape : {kMtpBatch32, Shape{128, 8, 64, 4, 16, 32768},
                               Shape{4, 8, 64, 4, 16, 131072}}) {
      flashmsa_args args = args_of(shape);
      args.kv_dtype = kv_dtype;
      const LaunchPlan plan = plan_launch(args, h200(), sm90::default_tuning());
      EXPECT_TRUE(plan.decode_kernel);
      EXPECT_EQ(plan.grid_ctas, shape.rows_per_request * shape.batch * 4 * plan.num_splits);
      EXPECT_EQ(plan.pacing_slack, 0);
      flashmsa_tuning rule = sm90::default_tuning();
      rule.decode_kernel = 1;  // q's dtype's rule: the prefill kernel past one CTA per SM
      EXPECT_EQ(plan_launch(args, h200(), rule).decode_kernel, shape.batch == 4);
    }
    flashmsa_args prefill = args_of(kPrefill32K);
    prefill.kv_dtype = kv_dtype;
    EXPECT_FALSE(plan_launch(prefill, h200(), sm90::default_tuning()).decode_kernel);
    flashmsa_args nine_rows = args_of({32, 9, 64, 4, 16, 32768});
    nine_rows.kv_dtype = kv_dtype;
    EXPECT_FALSE(plan_launch(nine_rows, h200(), sm90::default_tuning()).decode_kernel);
  }
}

// Per-token fp8 scales keep fp8's plan, stages included, in every kernel (the union tile, the
// token warps, the decode kernel's compact rings); a block's 2 x 128 scales are staged per
// stage (in rows of 40 floats, 2 x 160) in shared memory of their own, after the rings.
TEST(LaunchPlan, Fp8TokenScalesKeepTheShapesAndStageTheirScales) {
  static const float kScale = 1.0f;
  flashmsa_tuning union_tile = sm90::default_tuning();
  union_tile.token_warps = 0;
  for (const flashmsa_tuning& tuning : {sm90::default_tuning(), union_tile}) {
    for (const Shape& shape : {kDecodeBatch1, kDecodeBatch64, kMtpBatch32, kPrefill32K}) {
      flashmsa_args fp8 = args_of(shape);
      fp8.kv_dtype = FLASHMSA_DTYPE_FP8_E4M3;
      flashmsa_args scaled = fp8;
      scaled.k_token_scale = scaled.v_token_scale = &kScale;
      const LaunchPlan plain = plan_launch(fp8, h200(), tuning);
      const LaunchPlan plan = plan_launch(scaled, h200(), tuning);
      SCOPED_TRACE(name(shape));
      SCOPED_TRACE(tuning.token_warps);
      expect_same_kernel_and_grid(plan, plain);
      EXPECT_EQ(plan.token_warps, plain.token_warps);
      const bool compact = plan.token_warps || plan.decode_kernel;
      const uint32_t slot_bytes = compact ? sm90::kFp8TileBytes : sm90::kKvTileBytes;
      const uint32_t staged = plan.smem.union_blocks - plan.smem.token_scales;
      EXPECT_EQ(plan.smem.token_scales, plan.smem.v + plan.smem.num_stages * slot_bytes);
      EXPECT_EQ(staged, plan.smem.num_stages * 2u * 160u * 4u);
      EXPECT_EQ(plan.smem.bytes, plain.smem.bytes + staged);
      EXPECT_EQ(plain.smem.union_blocks, plain.smem.token_scales);
    }
  }
}

// The token-warp kernel: two-consumer prefill of fp8 K/V (per-token scales or not), the same
// launch otherwise, on compact rings of 16 KiB stages, as many as the header holds.
TEST(LaunchPlan, TokenWarpsTakeTheTwoConsumerFp8KernelOnCompactRings) {
  flashmsa_args fp8 = args_of(kPrefill32K);
  fp8.kv_dtype = FLASHMSA_DTYPE_FP8_E4M3;
  flashmsa_tuning union_tile = sm90::default_tuning();
  union_tile.token_warps = 0;
  const LaunchPlan plain = plan_launch(fp8, h200(), union_tile);
  const LaunchPlan warps = plan_launch(fp8, h200(), sm90::default_tuning());
  EXPECT_FALSE(plain.token_warps);
  EXPECT_TRUE(warps.token_warps);
  EXPECT_EQ(warps.decode_kernel, plain.decode_kernel);
  EXPECT_EQ(warps.num_consumer_warpgroups, 2);
  EXPECT_EQ(warps.tokens_per_tile, plain.tokens_per_tile);
  EXPECT_EQ(warps.num_splits, plain.num_splits);
  EXPECT_EQ(warps.grid_ctas, plain.grid_ctas);
  EXPECT_EQ(plain.smem.v, plain.smem.k + plain.smem.num_stages * sm90::kKvTileBytes);
  EXPECT_EQ(warps.smem.num_stages, sm90::kMaxStages);
  EXPECT_EQ(warps.smem.v, warps.smem.k + warps.smem.num_stages * sm90::kFp8TileBytes);
  EXPECT_EQ(warps.smem.union_blocks, warps.smem.v + warps.smem.num_stages * sm90::kFp8TileBytes);
  EXPECT_LE(warps.smem.bytes + sm90::kSharedMemoryAlignmentSlack,
            static_cast<uint32_t>(sm90::kSharedMemoryLimit));
  // Whatever the requests' length: a flat call and the same call paged take one kernel.
  flashmsa_args short_context = fp8;
  short_context.max_pages_per_request = 8;
  short_context.is_paged = 1;
  EXPECT_TRUE(plan_launch(short_context, h200(), sm90::default_tuning()).token_warps);
  short_context.is_paged = 0;
  short_context.total_k = 1000;
  EXPECT_TRUE(plan_launch(short_context, h200(), sm90::default_tuning()).token_warps);
  flashmsa_tuning forced = sm90::default_tuning();
  forced.token_warps = 1;
  // Per-token scales too, on the same rings (their staged scales:
  // Fp8TokenScalesKeepTheShapesAndStageTheirScales).
  flashmsa_args scaled = fp8;
  const float token_scale = 1.f;
  scaled.k_token_scale = scaled.v_token_scale = &token_scale;
  const LaunchPlan scaled_plan = plan_launch(scaled, h200(), sm90::default_tuning());
  EXPECT_TRUE(scaled_plan.token_warps);
  EXPECT_EQ(scaled_plan.smem.num_stages, warps.smem.num_stages);
  EXPECT_EQ(scaled_plan.smem.token_scales, warps.smem.union_blocks);
  // Never bf16 or decode.
  EXPECT_FALSE(plan_of(kPrefill32K, forced).token_warps);
  flashmsa_args decode = args_of(kDecodeBatch64);
  decode.kv_dtype = FLASHMSA_DTYPE_FP8_E4M3;
  EXPECT_FALSE(plan_launch(decode, h200(), forced).token_warps);
}

TEST(LaunchPlan, Nvfp4KvTakeTheDecodeKernelOrTheTwoConsumerKernel) {
  auto nvfp4 = [](const Shape& s) {
    flashmsa_args args = args_of(s);
    args.kv_dtype = FLASHMSA_DTYPE_NVFP4;
    return args;
  };
  // Decode batches: the decode kernel (its one-token consumer converts NVFP4), shapes as bf16.
  const LaunchPlan decode = plan_launch(nvfp4(kDecodeBatch64), h200(), sm90::default_tuning());
  EXPECT_TRUE(decode.decode_kernel);
  EXPECT_FALSE(decode.token_warps);
  EXPECT_EQ(decode.num_splits, plan_of(kDecodeBatch64).num_splits);
  EXPECT_FALSE(decode.speculate_first_block);
  // ... on compact rings, each stage's block scales staged beside it: four blocks in flight
  // where one 32 KiB stage held one.
  EXPECT_EQ(decode.ctas_per_sm, 2);
  EXPECT_EQ(decode.smem.num_stages, sm90::kMaxStages);
  EXPECT_EQ(decode.smem.v, decode.smem.k + decode.smem.num_stages * sm90::kNvfp4TileBytes);
  EXPECT_EQ(decode.smem.token_scales, decode.smem.v + decode.smem.num_stages * sm90::kNvfp4TileBytes);
  EXPECT_EQ(decode.smem.union_blocks,
            decode.smem.token_scales + decode.smem.num_stages * 2 * sm90::kNvfp4ScaleTileBytes);
  EXPECT_LE(decode.smem.bytes + sm90::kSharedMemoryAlignmentSlack,
            static_cast<uint32_t>(sm90::kTwoCtasPerSmSharedBytes));
  // Prefill: the union tile, its full 32 KiB stages written by the converter warps from a raw
  // ring of 8 KiB boxes, each raw stage's block scales staged beside it; no pacing.
  const LaunchPlan prefill = plan_launch(nvfp4(kPrefill32K), h200(), sm90::default_tuning());
  EXPECT_FALSE(prefill.token_warps);
  EXPECT_EQ(prefill.num_consumer_warpgroups, 2);
  EXPECT_EQ(prefill.smem.num_stages, sm90::kPrefillMaxStages);
  const uint32_t raw_stages = static_cast<uint32_t>(prefill.smem.raw_stages);
  EXPECT_GE(raw_stages, 2u);
  EXPECT_EQ(prefill.smem.v, prefill.smem.k + prefill.smem.num_stages * sm90::kKvTileBytes);
  EXPECT_EQ(prefill.smem.raw_k, prefill.smem.v + prefill.smem.num_stages * sm90::kKvTileBytes);
  EXPECT_EQ(prefill.smem.raw_v, prefill.smem.raw_k + raw_stages * sm90::kNvfp4TileBytes);
  EXPECT_EQ(prefill.smem.token_scales, prefill.smem.raw_v + raw_stages * sm90::kNvfp4TileBytes);
  EXPECT_EQ(prefill.smem.union_blocks,
            prefill.smem.token_scales + raw_stages * 2 * sm90::kNvfp4ScaleTileBytes);
  EXPECT_LE(prefill.smem.bytes + sm90::kSharedMemoryAlignmentSlack,
            static_cast<uint32_t>(sm90::kSharedMemoryLimit));
  EXPECT_EQ(prefill.pacing_slack, 0);
  EXPECT_FALSE(prefill.speculate_first_block);
  // Group size 1 (tiles of 128 tokens): the planning buffers leave no room for a raw stage,
  // so token warps, flat and paged alike.
  for (const bool paged : {false, true}) {
    const flashmsa_args one_head = nvfp4({8, 1024, 1, 1, 16, 4096, paged});
    SCOPED_TRACE(paged);
    EXPECT_TRUE(plan_launch(one_head, h200(), sm90::default_tuning()).token_warps);
  }
  // The override token_warps=1: token warps on compact rings of 8 KiB stages.
  flashmsa_tuning warps = sm90::default_tuning();
  warps.token_warps = 1;
  const LaunchPlan by_warps = plan_launch(nvfp4(kPrefill32K), h200(), warps);
  EXPECT_TRUE(by_warps.token_warps);
  EXPECT_EQ(by_warps.smem.num_stages, sm90::kMaxStages);
  EXPECT_EQ(by_warps.smem.raw_stages, 0);
  EXPECT_EQ(by_warps.smem.v, by_warps.smem.k + by_warps.smem.num_stages * sm90::kNvfp4TileBytes);
  // No call reaches the one-consumer shape for NVFP4 (it has no NVFP4 form): calls that would
  // take it (few rows a request, topk 64 decode, the override) take the two-consumer kernel.
  flashmsa_tuning overrides = sm90::default_tuning();
  overrides.one_consumer = 1;
  const LaunchPlan forced = plan_launch(nvfp4(kPrefill32K), h200(), overrides);
  EXPECT_FALSE(forced.token_warps);
  EXPECT_EQ(forced.num_consumer_warpgroups, 2);
  const LaunchPlan wide_topk = plan_launch(nvfp4({4, 1, 64, 4, 64, 131072}), h200(),
                                           sm90::default_tuning());
  EXPECT_FALSE(wide_topk.decode_kernel);
  EXPECT_EQ(wide_topk.num_consumer_warpgroups, 2);
  flashmsa_tuning no_decode_kernel = sm90::default_tuning();
  no_decode_kernel.decode_kernel = 0;
  const LaunchPlan decode_off = plan_launch(nvfp4(kDecodeBatch16), h200(), no_decode_kernel);
  EXPECT_FALSE(decode_off.decode_kernel);
  EXPECT_EQ(decode_off.num_consumer_warpgroups, 2);
}

TEST(LaunchPlan, ShortPrefillChunksOfOneToTwoWavesSplit) {
  // The production short chunks: 171 tokens (22 tiles x 4 KV heads = 88 units) 3 splits, 347
  // tokens (176 units) 3, through the workspace; 1404 tokens (704 units) and multi-token
  // prediction (one tile a request) keep one.
  for (const auto& [rows, splits] : {std::pair<int64_t, int32_t>{171, 3}, {347, 3}, {1404, 1}}) {
    const LaunchPlan plan = plan_of({1, rows, 64, 4, 16, 55339});
    SCOPED_TRACE(rows);
    EXPECT_FALSE(plan.decode_kernel);
    EXPECT_EQ(plan.num_consumer_warpgroups, 2);
    EXPECT_EQ(plan.num_splits, splits);
    EXPECT_EQ(plan.merges_in_workspace(), splits > 1);
  }
  EXPECT_EQ(plan_of({24, 8, 64, 4, 16, 32768}).num_splits, 1);  // 96 units, a tile a request
  EXPECT_EQ(plan_of({1, 171, 64, 4, 16, 17718}).num_splits, 1);  // 139 blocks: short unions
}

TEST(LaunchPlan, ShortPrefillSplitsThroughTheWorkspace) {
  // 64 tokens: 8 tiles x 4 KV heads = 32 units for 132 SMs, so four splits, merged by the merge
  // kernel from fp32 partials of every row.
  const LaunchPlan plan = plan_of({1, 64, 64, 4, 16, 32768});
  EXPECT_FALSE(plan.decode_kernel);
  EXPECT_EQ(plan.num_consumer_warpgroups, 2);
  EXPECT_EQ(plan.num_splits, 4);
  EXPECT_FALSE(plan.cluster_reduce);
  ASSERT_TRUE(plan.merges_in_workspace());
  const size_t rows = 4 * 64 * 64;
  EXPECT_EQ(plan.workspace.partial_lse, rows * 128 * 4);
  EXPECT_EQ(plan.workspace.partial_lse_t, rows * 128 * 4 + rows * 4);
  EXPECT_EQ(plan.workspace.bytes, rows * 128 * 4 + 2 * rows * 4);
}

TEST(LaunchPlan, GroupOfOneHeadTilesOneHundredTwentyEightTokens) {
  const LaunchPlan plan = plan_of({1, 4096, 8, 8, 16, 4096});
  EXPECT_EQ(plan.heads_per_chunk, 1);
  EXPECT_EQ(plan.num_head_chunks, 1);
  EXPECT_EQ(plan.tokens_per_tile, 128);
  EXPECT_EQ(plan.warp_planning, sm90::kWarpPlanNone);  // 2048 candidates: block-wide plan
}

TEST(LaunchPlan, OneConsumerTilesShrinkUntilAStageFitsBesideTheirPlanning) {
  // One head a group at topk 32: 64 tokens would plan over 2048 candidates of two mask words,
  // which leaves no room for a K and V stage at two CTAs per SM; 32 tokens do.
  const LaunchPlan plan = plan_of({1, 16, 1, 1, 32, 20000});
  EXPECT_EQ(plan.num_consumer_warpgroups, 1);
  EXPECT_EQ(plan.tokens_per_tile, 32);
  EXPECT_EQ(plan.smem.num_stages, 1);
  // At topk 16 64 tokens fit, and keep them.
  EXPECT_EQ(plan_of({1, 16, 1, 1, 16, 20000}).tokens_per_tile, 64);
}

TEST(LaunchPlan, GroupsWiderThanAWarpgroupAreCutIntoHeadChunks) {
  const LaunchPlan plan = plan_of({1, 1, 128, 1, 16, 32768});
  EXPECT_FALSE(plan.decode_kernel);  // more than 16 heads a KV head
  EXPECT_EQ(plan.num_consumer_warpgroups, 1);
  EXPECT_EQ(plan.heads_per_chunk, 64);
  EXPECT_EQ(plan.num_head_chunks, 2);
  EXPECT_FALSE(plan.push_reduce);  // the push reduction holds 16 rows
  EXPECT_EQ(plan.grid_ctas % 2, 0);
}

TEST(LaunchPlan, TopkSixtyFourDecodesOnTheOneConsumerShape) {
  const LaunchPlan plan = plan_of({4, 1, 64, 4, 64, 131072});
  EXPECT_FALSE(plan.decode_kernel);  // more than 32 index entries a row
  EXPECT_EQ(plan.num_consumer_warpgroups, 1);
  EXPECT_GT(plan.num_splits, 1);
  EXPECT_LE(plan.num_splits, sm90::kMaxClusterSplits);
  EXPECT_TRUE(plan.cluster_reduce);
}

TEST(LaunchPlan, TopkOneHasOneBlockToSplit) {
  const LaunchPlan plan = plan_of({1, 1, 64, 4, 1, 32768});
  EXPECT_TRUE(plan.decode_kernel);
  EXPECT_EQ(plan.num_splits, 1);
  EXPECT_FALSE(plan.cluster_reduce);
}

TEST(LaunchPlan, EmptyCallsLaunchNothing) {
  Shape none = kDecodeBatch1;
  none.rows_per_request = 0;
  EXPECT_TRUE(plan_of(none).empty);
  EXPECT_EQ(plan_of(none).workspace.bytes, 0u);
}

// The plan refuses `args` as not supported, with a message holding `expected`.
void expect_not_supported(const flashmsa_args& args, const std::string& expected) {
  try {
    plan_launch(args, h200(), sm90::default_tuning());
    ADD_FAILURE() << "planned a call that should be refused with '" << expected << "'";
  } catch (const flashmsa::Error& error) {
    EXPECT_EQ(error.status(), FLASHMSA_ERROR_NOT_SUPPORTED);
    EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
  }
}

TEST(LaunchPlan, GridsPastOneLaunchAreNotSupported) {
  // 2^30 decode rows x 4 KV heads: one CTA each.
  flashmsa_args args = args_of(kDecodeBatch64);
  args.batch_size = args.total_q = int64_t{1} << 30;
  expect_not_supported(args, "too large for one launch");
}

TEST(LaunchPlan, RowsPastInt32AreNotSupported) {
  flashmsa_args args = args_of(kPrefill32K);
  args.total_q = int64_t{1} << 31;
  expect_not_supported(args, "query rows");
}

TEST(LaunchPlan, TuningOverridesOneDecisionEach) {
  flashmsa_tuning tuning = sm90::default_tuning();
  tuning.splits = 4;
  EXPECT_EQ(plan_of(kDecodeBatch1, tuning).num_splits, 4);
  tuning.splits = 17;  // past the largest cluster: the plan's own
  EXPECT_EQ(plan_of(kDecodeBatch1, tuning).num_splits, 16);

  tuning = sm90::default_tuning();
  tuning.cluster = 0;
  const LaunchPlan merged = plan_of(kDecodeBatch1, tuning);
  EXPECT_FALSE(merged.cluster_reduce);
  EXPECT_TRUE(merged.merges_in_workspace());
  EXPECT_GT(merged.workspace.bytes, 0u);

  tuning = sm90::default_tuning();
  tuning.decode_kernel = 0;
  EXPECT_FALSE(plan_of(kDecodeBatch1, tuning).decode_kernel);
  tuning.decode_kernel = 2;  // every call of up to 8 rows a request
  EXPECT_TRUE(plan_of(kMtpBatch32, tuning).decode_kernel);

  tuning = sm90::default_tuning();
  tuning.l2_promotion = 2;
  tuning.evict_first = 1;
  tuning.speculate = 0;
  tuning.warp_plan = 2;
  const LaunchPlan prefill = plan_of(kPrefill32K, tuning);
  EXPECT_EQ(prefill.kv_l2_promotion, L2Promotion::k256B);
  EXPECT_TRUE(prefill.kv_evict_first);
  EXPECT_FALSE(prefill.speculate_first_block);
  EXPECT_EQ(prefill.warp_planning, sm90::kWarpPlanSorted);

  tuning = sm90::default_tuning();
  tuning.throttle = 0;
  tuning.pace = 0;
  const LaunchPlan mtp = plan_of(kMtpBatch32, tuning);
  EXPECT_EQ(mtp.inflight_throttle, 0);
  EXPECT_EQ(mtp.pacing_slack, 0);
}

TEST(LaunchPlan, DeepPipelineRunsOneCtaPerSmWithMoreStages) {
  flashmsa_tuning tuning = sm90::default_tuning();
  tuning.deep_pipeline = 1;
  const LaunchPlan plan = plan_of(kDecodeBatch16, tuning);
  EXPECT_EQ(plan.ctas_per_sm, 1);
  EXPECT_GT(plan.smem.num_stages, 1);
}

TEST(LaunchPlan, InvariantsOverASweep) {
  for (int64_t batch : {1, 2, 3, 5, 8, 16, 33, 64, 128, 300}) {
    for (int64_t rows : {1, 2, 4, 8, 16, 171, 1024}) {
      for (int64_t heads : {1, 4, 8, 16, 64}) {
        for (int64_t topk : {1, 16, 32, 64}) {
          const Shape s{batch, rows, heads, heads >= 4 ? 4 : 1, topk, 20000};
          SCOPED_TRACE(name(s));
          LaunchPlan plan;
          try {
            plan = plan_of(s);
          } catch (const flashmsa::Error& error) {
            ADD_FAILURE() << error.what();
            continue;
          }
          const flashmsa_args args = args_of(s);
          ASSERT_FALSE(plan.empty);
          EXPECT_GE(plan.num_splits, 1);
          EXPECT_LE(plan.num_splits, sm90::kMaxMergeSplits);
          if (plan.cluster_reduce) EXPECT_LE(plan.num_splits, sm90::kMaxClusterSplits);
          EXPECT_EQ(plan.merges_in_workspace(), plan.workspace.bytes > 0);
          EXPECT_EQ(plan.grid_ctas,
                    plan.max_tiles * args.num_kv_heads * plan.num_head_chunks * plan.num_splits);
          EXPECT_LE(plan.tokens_per_tile * args.topk, sm90::kMaxCandidates);
          EXPECT_EQ(plan.heads_per_chunk * plan.num_head_chunks >= args.num_qo_heads /
                                                                      args.num_kv_heads,
                    true);
          const uint32_t budget = plan.ctas_per_sm == 1 ? sm90::kSharedMemoryLimit
                                                        : sm90::kTwoCtasPerSmSharedBytes;
          EXPECT_LE(plan.smem.bytes + sm90::kSharedMemoryAlignmentSlack, budget);
          EXPECT_EQ(plan.smem.k % 1024, 0u);
          EXPECT_EQ(plan.smem.v % 1024, 0u);
          if (plan.decode_kernel) EXPECT_EQ(plan.max_tiles, args.total_q);
          if (plan.push_reduce) EXPECT_TRUE(plan.cluster_reduce);
        }
      }
    }
  }
}

}  // namespace
