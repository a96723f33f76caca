// The Hopper MSA kernel: one CTA per (query tile, KV head, head chunk, KV split).
//   planning (all threads) -> warpgroup 0: TMA producer | warpgroups 1..kConsumers: wgmma.
// See docs/design.md for the tiling, the union-of-blocks plan and the measured trade-offs.
#pragma once

#include "sm90/consumer.cuh"
#include "sm90/kernel_traits.h"
#include "sm90/params.h"
#include "sm90/planning.cuh"
#include "sm90/producer.cuh"
#include "sm90/ptx.cuh"
#include "sm90/timeline.cuh"

namespace flashmsa::sm90 {

template <typename Element, bool kTemperatureLse, int kConsumers>
__global__ void __launch_bounds__(RoleConfig<kConsumers>::kThreads,
                                  RoleConfig<kConsumers>::kCtasPerSm)
    prefill_kernel(const __grid_constant__ PrefillParams params) {
  using Roles = RoleConfig<kConsumers>;
  extern __shared__ uint8_t shared_memory_raw[];
  const uint32_t misalignment = smem_address(shared_memory_raw) % 1024;
  const Smem smem{shared_memory_raw + (1024 - misalignment) % 1024, params.smem_layout};
  const int kv_head = blockIdx.y / params.num_head_chunks;
  const int head_chunk = blockIdx.y % params.num_head_chunks;

  FLASHMSA_MARK(kMarkEntry);
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < params.smem_layout.num_stages; ++stage) {
      mbarrier_init(&smem.header().k_full[stage], 1);  // the producer's arrive + TMA bytes
      mbarrier_init(&smem.header().v_full[stage], 1);
      mbarrier_init(&smem.header().k_empty[stage], 128 * kConsumers);
      mbarrier_init(&smem.header().v_empty[stage], 128 * kConsumers);
    }
    fence_barrier_init();
  } else if (threadIdx.x == 32) {
    prefetch_tensor_map(&params.tma_k);
    prefetch_tensor_map(&params.tma_v);
  }
  // Everything above overlaps the previous kernel's tail (programmatic dependent launch); the
  // inputs it may have written are read only from here on.
  wait_for_previous_grid();
  FLASHMSA_MARK(kMarkWaited);
  const TilePlan plan = plan_tile(params, smem, blockIdx.x, kv_head);  // ends with a barrier
  // The merge kernel of a KV split (and the next kernel of the stream) may now be scheduled: it
  // waits for this grid to complete before it reads anything.
  allow_next_grid_launch();
  FLASHMSA_MARK(kMarkPlanned);
  if (plan.batch_index < 0) return;

  if (threadIdx.x < 128) {
    registers_decrease<Roles::kProducerRegisters>();
    if (threadIdx.x == 0) produce(params, smem, plan, kv_head);
  } else {
    registers_increase<Roles::kConsumerRegisters>();
    consume<Element, kTemperatureLse, kConsumers>(params, smem, plan, kv_head, head_chunk);
  }
}

}  // namespace flashmsa::sm90
