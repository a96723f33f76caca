/* FlashMSA test-only entry points: the Hopper launch with some of its decisions overridden.
 *
 * The release entry points (flashmsa.h) decide every launch from the arguments and the device
 * alone. Tests reach the kernels' other paths, and benchmarks sweep alternatives, through these
 * functions instead: each field of flashmsa_tuning overrides one decision of the launch plan
 * (src/sm90/launch_plan.h), and FLASHMSA_TUNING_DEFAULT, or a value outside the field's range,
 * leaves the plan's own choice. Results of every setting follow the contract; only the speed
 * differs (some settings also change the bits of the result: a split count changes the order of
 * the sums). Not part of the stable ABI: fields may change with the kernels.
 */
#ifndef FLASHMSA_FLASHMSA_TESTING_H_
#define FLASHMSA_FLASHMSA_TESTING_H_

#include "flashmsa/flashmsa.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHMSA_TUNING_DEFAULT (-1)

typedef struct flashmsa_tuning {
  int32_t splits;            /* KV splits per tile: 1 .. the most the call allows */
  int32_t decode_kernel;     /* 0 never the decode kernel, 1 the plan's rule for q's-dtype
                                K/V, 2 every call of at most 8 rows per request whose heads
                                and topk it takes (converted K/V formats' default) */
  int32_t one_consumer;      /* 1: the prefill kernel's one-consumer shape for any call */
  int32_t tiles_outer;       /* grid order: 1 tile outermost, 0 head column outermost */
  int32_t evict_first;       /* L2 policy of the K/V loads: 1 evict-first, 0 evict-normal */
  int32_t l2_promotion;      /* of the K/V tensor maps: 0 none, 1 128 B, 2 256 B */
  int32_t speculate;         /* warp planning loads the slice's probable first block early */
  int32_t deep_pipeline;     /* 1: one-consumer grids of one CTA per SM keep 3 stages */
  int32_t ctas_per_sm;       /* 1: every one-consumer grid at one CTA per SM */
  int32_t stages;            /* the one-consumer and decode kernels' most stages, 1-4 */
  int32_t prefill_stages;    /* the two-consumer kernel's most stages, 2-4 */
  int32_t throttle;          /* K/V loads in flight: 0 rings only, 1, 2 (producer.cuh) */
  int32_t pace;              /* pacing: 0 off, else 9 + slack in quarter blocks, 1-17 */
  int32_t cluster;           /* 0: one-consumer and decode splits merge through the workspace */
  int32_t push;              /* 0: cluster reductions pull instead of push */
  int32_t warp_plan;         /* two-consumer tiles: 0 block-wide plan, 1 the rule, 2 sorted */
  int32_t token_warps;       /* two-consumer tiles of fp8 or NVFP4 K/V: 1 each warp its own
                                rows' blocks, converting in registers (token_warp_consumer.cuh;
                                fp8's default), 0 the union tile, its stages rewritten by the
                                producer's converter warps (NVFP4's default) */
} flashmsa_tuning;

/* Every field FLASHMSA_TUNING_DEFAULT. */
void flashmsa_tuning_init(flashmsa_tuning* tuning);

/* flashmsa_sparse_attention_with_workspace_fn with the plan's decisions overridden; `tuning`
 * NULL is the release behaviour. */
flashmsa_status flashmsa_sparse_attention_tuned(const flashmsa_args* args,
                                                const flashmsa_tuning* tuning,
                                                flashmsa_workspace_fn workspace_fn,
                                                void* context);

#ifdef __cplusplus
}
#endif

#endif /* FLASHMSA_FLASHMSA_TESTING_H_ */
