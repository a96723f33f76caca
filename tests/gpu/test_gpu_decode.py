"""Decode and multi-token prediction shapes (issue 4): MiniMax-M3 heads, paged K/V with permuted
pages, 1, 2 or 8 query tokens per request, ragged KV lengths (below 128, not multiples of 128,
zero), each compared with the CPU backend and the fp64 reference; and a decode step captured once
in a CUDA graph, replayed on new inputs copied into its buffers, equal to eager bitwise."""

import pytest
import torch

import flashmsa
from gpu_harness import (DEVICE, DTYPES, assert_bitwise, check_gpu_result, dtype_id,
                         garbage_indices, make_case, replay_on_new_inputs, run_gpu)

HEADS = dict(num_qo_heads=64, num_kv_heads=4, topk=16)
# KV lengths drawn for ragged batches: empty, below one block, around block edges, long.
LENGTH_POOL = [0, 1, 7, 100, 127, 128, 129, 255, 256, 1000, 2049, 3000, 4095, 4097, 6000, 9000]


def kv_lengths(batch, seed):
    if batch == 1:
        return [20000]
    if batch == 3:
        return [127, 4097, 20000]
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(LENGTH_POOL), (batch,), generator=generator)
    lengths = [LENGTH_POOL[i] for i in picks.tolist()]
    lengths[0] = 30000          # one long request: many blocks to choose from
    return lengths


def decode_case(batch, qlen, dtype, seed, lengths=None, view="contiguous"):
    lengths = kv_lengths(batch, seed) if lengths is None else lengths
    name = f"decode-b{batch}-q{qlen}-{dtype_id(dtype)}-{view}-seed{seed}"
    return make_case(name, [qlen] * batch, lengths, HEADS["num_qo_heads"],
                     HEADS["num_kv_heads"], HEADS["topk"], True, dtype=dtype, seed=seed,
                     layout="paged", view=view)


@pytest.mark.parametrize("qlen", [1, 2, 8])
@pytest.mark.parametrize("batch", [1, 3, 64, 128])
def test_decode_bf16(batch, qlen):
    case = decode_case(batch, qlen, torch.bfloat16, seed=61 + batch + qlen)
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("qlen", [1, 8])
@pytest.mark.parametrize("batch", [3, 64])
def test_decode_fp16(batch, qlen):
    case = decode_case(batch, qlen, torch.float16, seed=71 + batch + qlen)
    check_gpu_result(case, run_gpu(case))


# Decode tiles of more than 32 index entries take the multi-round path of warp planning
# (src/sm90/warp_planning.cuh: entries 32 apart share a lane): M3 heads with 3 or 4 tokens per
# request (48 or 64 entries), and group size 8 with 8 tokens (8 x 16 = 128, all four rounds).
@pytest.mark.parametrize("heads,qlen", [((64, 4), 3), ((64, 4), 4), ((16, 2), 8)],
                         ids=["m3-q3", "m3-q4", "g8-q8"])
def test_decode_multi_round_garbage_indices(heads, qlen):
    """Duplicates within and across a tile's tokens and rounds, a negative mid-list, huge and
    out-of-range ids (contract section 4), and garbage in the page table's unused entries."""
    num_qo_heads, num_kv_heads = heads
    lengths = [30000, 4097, 129, 1000, 9000, 20000]
    name = f"decode-garbage-hq{num_qo_heads}-hkv{num_kv_heads}-q{qlen}"
    case = make_case(name, [qlen] * len(lengths), lengths, num_qo_heads, num_kv_heads, 16, True,
                     seed=91 + qlen, layout="paged")
    q2k = garbage_indices(case.cpu["q2k_indices"], num_blocks_min=2,
                          generator=torch.Generator().manual_seed(qlen))
    table = case.cpu["page_table"].clone()
    table[table < 0] = 2 ** 31 - 1                      # unused entries: never dereferenced
    case.with_gpu(q2k_indices=q2k.to(DEVICE), page_table=table.to(DEVICE))
    check_gpu_result(case, run_gpu(case))


# MiniMax-M3's tensor-parallel shapes (TP 4: Hq 16 / Hkv 1, TP 8: Hq 8 / Hkv 1) and a group of 3
# heads, at one token per request: small batches split every tile over a thread-block cluster,
# and with fewer than 16 heads per KV head the reduction also carries rows with no head behind
# them (src/sm90/cluster_reduce.cuh). Temperature LSEs included (run_gpu returns them).
@pytest.mark.parametrize("batch", [1, 3, 9])
@pytest.mark.parametrize("heads", [(16, 1), (8, 1), (12, 4)], ids=["tp4", "tp8", "g3"])
def test_decode_one_token_group_sizes(heads, batch):
    num_qo_heads, num_kv_heads = heads
    lengths = kv_lengths(batch, seed=101) if batch != 9 else [30000, 0, 127, 129, 4097, 9000,
                                                             256, 1, 20000]
    name = f"decode-one-token-hq{num_qo_heads}-hkv{num_kv_heads}-b{batch}"
    case = make_case(name, [1] * batch, lengths, num_qo_heads, num_kv_heads, 16, True,
                     seed=101 + batch, layout="paged",
                     scalars=dict(lse_temperature_scale=0.7))
    check_gpu_result(case, run_gpu(case))


# The launch picks the split count for the tiles a call most likely has: B x ceil(r / T) when
# total_q = B x r (launch.cu). Requests of unequal rows with such a total have more tiles (up to
# the grid's bound), so they run with more CTAs than the count assumed: still every tile, once.
@pytest.mark.parametrize("qlens", [[1, 15, 8, 8], [3, 1, 2, 2], [0, 16, 5, 11]],
                         ids=["total-32", "total-8", "total-32-empty"])
def test_decode_unequal_rows_with_uniform_total(qlens):
    lengths = [30000, 4097, 129, 9000]
    case = make_case(f"decode-unequal-rows-{'-'.join(map(str, qlens))}", qlens, lengths,
                     HEADS["num_qo_heads"], HEADS["num_kv_heads"], HEADS["topk"], True,
                     seed=121 + sum(qlens), layout="paged")
    check_gpu_result(case, run_gpu(case))


# Decode grids that fit one CTA per SM ran it with three stages and pushed their split partials
# at one CTA per SM until two per SM measured faster (launch_plan.cpp); the
# test-only override deep_pipeline=1 keeps that path, for the one-token kernel
# (test_gpu_one_token.py's reduction paths) and, here, for the one-consumer kernel of requests
# of 2 and 4 rows: batch 3 with 4 splits, 12 clusters of 4 CTAs at one CTA per SM, pushed (the
# launch falls back to two CTAs per SM where its clusters would not all be resident).
@pytest.mark.parametrize("qlen", [2, 4])
def test_decode_deep_pipeline_override(qlen, launch_overrides):
    launch_overrides(deep_pipeline=1, splits=4)
    case = decode_case(3, qlen, torch.bfloat16, seed=111 + qlen)
    case.name = f"decode-deep-pipeline-b3-q{qlen}"
    check_gpu_result(case, run_gpu(case))


# The throttle (producer.cuh) issues a block's operands only once the previous block's have
# landed; multi-token prediction grids of one wave run it at 2 by default (launch.cu), the rest
# at 0. The throttle override sets each of 0, 1, 2 for: multi-token prediction on the
# two-consumer kernel (two stages), batch 3 (eleven splits of a few blocks each) and 64 (one
# split, whole unions), and the one-token kernel at batch 16 on the deep pipeline (two splits,
# three stages, pushed).
THROTTLED = {"mtp-b3": (3, 8, 0), "mtp-b64": (64, 8, 0), "one-token-b16-deep": (16, 1, 1)}


@pytest.mark.parametrize("shape", sorted(THROTTLED))
@pytest.mark.parametrize("throttle", [0, 1, 2])
def test_decode_inflight_throttle(throttle, shape, launch_overrides):
    batch, qlen, deep_pipeline = THROTTLED[shape]
    launch_overrides(throttle=throttle, deep_pipeline=deep_pipeline)
    case = decode_case(batch, qlen, torch.bfloat16, seed=131 + batch + qlen + throttle)
    case.name = f"decode-throttle-{throttle}-{shape}"
    check_gpu_result(case, run_gpu(case))


# Pacing (pacing.cuh, on by default for one-wave multi-token grids) lets the CTAs with more
# blocks left than the mean load unthrottled; it moves time, never data, so a paced call equals
# the unpaced one bitwise, and so does the next paced call (the device counters a call leaves
# behind must be back where they started). Batch 32: 128 CTAs of whole unions; batch 8: four
# splits a unit. The pace override: 9 + slack in quarter blocks (9, the default: the mean; 1:
# two blocks below it, so most CTAs load unthrottled); 0 off.
@pytest.mark.parametrize("batch", [8, 32])
@pytest.mark.parametrize("pace", [1, 9])
def test_decode_paced_equals_unpaced(pace, batch, launch_overrides):
    case = decode_case(batch, 8, torch.bfloat16, seed=141 + batch + pace)
    case.name = f"decode-pace-{pace}-b{batch}"
    launch_overrides(pace=0)
    want = run_gpu(case)
    launch_overrides(pace=pace)
    for attempt in ("first", "second"):
        got = run_gpu(case)
        for what, g, w in zip(("out", "lse", "lse_t"), got, want):
            assert_bitwise(case.name, f"{what}, {attempt} paced call vs unpaced", g, w)
    check_gpu_result(case, got)


@pytest.mark.parametrize("view", ["packed", "nhd"])
def test_decode_cache_views(view):
    """vLLM's packed K|V cache and an NHD cache, both read in place, equal the contiguous cache
    bitwise (same seed: same logical data)."""
    want = run_gpu(decode_case(16, 8, torch.bfloat16, seed=81))
    case = decode_case(16, 8, torch.bfloat16, seed=81, view=view)
    got = run_gpu(case)
    for what, g, w in zip(("out", "lse", "lse_t"), got, want):
        assert_bitwise(case.name, f"{what} vs contiguous cache", g, w)
    check_gpu_result(case, got)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("scratch", ["allocator", "workspace"])
@pytest.mark.parametrize("batch,qlen", [(3, 1), (3, 8), (8, 8), (64, 8), (128, 1)])
def test_decode_graph_replay_with_new_inputs(batch, qlen, scratch, dtype):
    """Capture once on step A's buffers, copy step B's inputs (new q, K/V pages, indices, page
    table and lengths; same shapes) into them, replay: equal to an eager call on B bitwise, and
    right. B's lengths are a permutation of A's, so every shape, page count included, matches.
    Batch 3 with 8 tokens runs the one-token kernel, one CTA per row (split_rules.h); batch 8
    with 8 tokens is a paced one-wave grid of four splits (pacing.cuh)."""
    step_a = decode_case(batch, qlen, dtype, seed=91)
    lengths_b = list(reversed(kv_lengths(batch, seed=91)))
    step_b = decode_case(batch, qlen, dtype, seed=92, lengths=lengths_b)
    name = f"graph-new-inputs-{scratch}-{step_b.name}"
    workspace = flashmsa.MSASparseAttentionWorkspace(DEVICE) if scratch == "workspace" else None
    captured, eager_b = replay_on_new_inputs(name, step_a, step_b, workspace)
    for what, got, want in zip(("out", "lse", "lse_t"), captured, eager_b):
        assert_bitwise(name, f"replay on new inputs: {what} vs eager", got, want)
    step_b.name = name
    check_gpu_result(step_b, eager_b)
