// The launch of one Hopper call, decided once on the host from the validated arguments and the
// device's properties alone (never from device data, so that the workspace size and the grid
// of a call can be known before a CUDA graph is captured): which kernel, how rows are tiled,
// how many CTAs share a tile's blocks and how they combine, the pipeline depth, the L2 policy,
// and the shared-memory and workspace layouts. plan_launch is a pure function: the CPU test
// suite checks its decisions (tests/cpp/test_launch_plan.cpp).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <functional>

#include "flashmsa/flashmsa.h"
#include "flashmsa/flashmsa_testing.h"
#include "sm90/kernel_traits.h"

namespace flashmsa::sm90 {

// What the plan needs to know of the device.
struct DeviceProperties {
  int32_t multiprocessors = 0;
  // Thread-block clusters of `cluster_size` CTAs, `shared_bytes` of dynamic shared memory each,
  // that the device holds at once, for the decode kernel (decode_kernel) or the prefill
  // kernel's one-consumer shape; 0 where unknown.
  std::function<int(bool decode_kernel, uint32_t shared_bytes, int cluster_size)>
      max_active_clusters;
};

// Split partials in the workspace (splits outside a cluster), each region 256-byte aligned.
struct WorkspaceLayout {
  size_t partial_out = 0, partial_lse = 0, partial_lse_t = 0, bytes = 0;
};

// L2 promotion of the K/V tensor maps (CUtensorMapL2promotion's NONE, L2_128B, L2_256B).
enum class L2Promotion : int32_t { kNone = 0, k128B = 1, k256B = 2 };

struct LaunchPlan {
  bool empty = false;  // no query row or no request: nothing to launch

  // The decode kernel (decode_kernel.cuh: one CTA per query row, KV head and split) or the
  // prefill kernel (prefill_kernel.cuh) with num_consumer_warpgroups consumers: 2 at one CTA per
  // SM, 1 (the one-consumer shape, for calls of few rows per request) at two.
  bool decode_kernel = false;
  int32_t num_consumer_warpgroups = 2;
  int32_t ctas_per_sm = 1;

  // Row tiling: a consumer warpgroup's 64 rows are tokens_per_warpgroup tokens x
  // heads_per_chunk query heads of one KV head; groups wider than 64 heads are cut into
  // num_head_chunks chunks, each its own CTA column. Decode tiles are single rows.
  int32_t heads_per_chunk = 0, num_head_chunks = 0, tokens_per_warpgroup = 0,
          tokens_per_tile = 0;
  int64_t max_tiles = 0;  // per head column: a bound, CTAs past the real tiles exit
  // Rows per request where every request may hold the same number (total_q = B x r), else 0.
  int32_t uniform_rows = 0;

  // KV split: num_splits CTAs share each tile's union of blocks, combined inside a thread-block
  // cluster (cluster_reduce; by pushes into the owners' shared memory with push_reduce) or
  // through the workspace and the merge kernel.
  int32_t num_splits = 1;
  bool cluster_reduce = false;
  bool push_reduce = false;

  bool tiles_outer = false;     // grid order (AttentionParams::tiles_outer)
  int32_t warp_planning = kWarpPlanNone;
  bool speculate_first_block = true;
  bool kv_evict_first = false;  // L2 policy of the K/V loads
  L2Promotion kv_l2_promotion = L2Promotion::kNone;
  int32_t inflight_throttle = 0;  // AttentionParams::inflight_throttle
  int32_t pacing_slack = 0;       // AttentionParams::pacing_slack
  // The two-consumer fp8 kernel with the token-warp consumer (token_warp_consumer.cuh), on
  // compact rings.
  bool token_warps = false;

  SmemLayout smem{};
  WorkspaceLayout workspace;
  int64_t grid_ctas = 0;  // max_tiles x head columns x splits, one linear grid dimension

  // Split partials go through the workspace and the merge kernel.
  bool merges_in_workspace() const { return num_splits > 1 && !cluster_reduce; }
};

// The plan of a call whose arguments validate_args accepted. Throws flashmsa::Error where no
// launch can hold the call. `tuning` overrides decisions for tests and measurements
// (flashmsa_testing.h); flashmsa_tuning_init's values leave every decision to the plan.
LaunchPlan plan_launch(const flashmsa_args& args, const DeviceProperties& device,
                       const flashmsa_tuning& tuning);

// A flashmsa_tuning that overrides nothing.
flashmsa_tuning default_tuning();

}  // namespace flashmsa::sm90
