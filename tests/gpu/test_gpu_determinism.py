"""Run-to-run determinism and CUDA graphs (contract sections 6 and 9): two calls on identical
inputs are bitwise equal, and a captured call replays to the eager result bitwise, with scratch
from PyTorch's allocator or from a warmed MSASparseAttentionWorkspace."""
import math

import pytest
import torch

import flashmsa
from gpu_harness import (DEVICE, DTYPES, assert_bitwise, capture_graph, check_gpu_result,
                         dtype_id, garbage_indices, make_case, replay, run_gpu)

# (name, q lens, k lens, Hq, Hkv, topk, causal, pattern)
CASES = [
    ("m3_prefill", [1000], [5000], 64, 4, 16, True, "indexer"),
    ("m3_ragged", [600, 1, 200, 8], [4000, 300, 2500, 9000], 64, 4, 16, True, "random"),
    ("tp4_full", [300, 90], [2000, 1000], 16, 1, 16, False, "clustered"),
]


def _case(spec, dtype, suffix, seed=51):
    label, lens_q, lens_k, hq, hkv, topk, causal, pattern = spec
    return make_case(f"{suffix}-{label}-{dtype_id(dtype)}", lens_q, lens_k, hq, hkv, topk, causal,
                     dtype=dtype, pattern=pattern, seed=seed)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("spec", CASES, ids=lambda s: s[0])
def test_two_calls_bitwise_equal(spec, dtype):
    case = _case(spec, dtype, "twice")
    first = run_gpu(case)
    check_gpu_result(case, first)
    second = run_gpu(case)
    for what, a, b in zip(("out", "lse", "lse_t"), second, first):
        assert_bitwise(case.name, f"second call's {what}", a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("scratch", ["allocator", "workspace"])
@pytest.mark.parametrize("spec", CASES, ids=lambda s: s[0])
def test_graph_replay_equals_eager(spec, scratch, dtype):
    case = _case(spec, dtype, f"graph-{scratch}")
    workspace = flashmsa.MSASparseAttentionWorkspace(DEVICE) if scratch == "workspace" else None
    # The eager call also warms the workspace: capture may not grow it (section 9).
    eager = run_gpu(case, workspace=workspace)
    check_gpu_result(case, eager)
    out = torch.full_like(case.gpu["q"], math.nan)

    def call():
        return flashmsa.msa_sparse_attention(**case.gpu, out=out, return_temperature_lse=True,
                                             workspace=workspace)

    graph, captured = capture_graph(case.name, call)
    for attempt in range(2):
        replay(case.name, graph, captured)
        for what, got, want in zip(("out", "lse", "lse_t"), captured, eager):
            assert_bitwise(case.name, f"replay {attempt}: {what} vs eager", got, want)
    # Eager with and without the workspace: identical inputs, identical outputs.
    if workspace is not None:
        plain = run_gpu(case)
        for what, got, want in zip(("out", "lse", "lse_t"), plain, eager):
            assert_bitwise(case.name, f"{what} without vs with workspace", got, want)


# Two-consumer tiles of at most 128 candidates plan in one warp, ascending by block, through a
# bitmap of the request's blocks (warp_planning.cuh's plan_tile_sorted_in_warp);
# the warp_plan=2 override gives them the warp's sorting network instead, =0 the
# block-wide plan (planning.cuh). All three must build the same union in the same order with
# the same token masks, so the results are bitwise equal. (name, q lens, k lens, Hq, Hkv, topk,
# q_offset, layout, garbage indices): M3 prefill and multi-token prediction (8 tokens x topk 16
# = 128 candidates), ragged, with short and non-multiple-of-128 key lengths; a request of
# 140000 keys (a bitmap of 35 words: two rounds of the warp's count); 32-token tiles of topk 4
# (token bits up to 31); the contract's worst index values.
SORTED_PLAN_CASES = [
    ("m3_prefill_paged", [700], [3000], 64, 4, 16, None, "paged", False),
    ("m3_mtp_ragged", [8, 8, 8, 8, 8], [5000, 77, 1000, 300, 4097], 64, 4, 16, None, "paged",
     False),
    ("m3_ragged_garbage", [150, 5, 97], [1800, 130, 1000], 64, 4, 16, None, "flat", True),
    ("g4_topk4_offset", [90, 40], [2600, 900], 16, 4, 4, [2000, 100], "paged", False),
    ("m3_mtp_speculation_misses", [8, 8, 8], [3000, 1284, 640], 64, 4, 16, None, "paged",
     False),
    ("m3_mtp_long_request", [8, 8], [140000, 9000], 64, 4, 16, None, "paged", False),
]


def _speculation_misses(case):
    """Request 1 (8 tokens at positions 1276-1283 of 1284 keys): token 0 picks only block 10,
    which it cannot see (its keys end at 1277) though the tile's last token could; the others
    pick only block 11, past every key. The lowest entry is then speculatively loaded
    (speculate_lowest_block), and the union is empty: the guess must be discarded."""
    q2k = case.cpu["q2k_indices"].clone()
    q2k[:, 8, :] = 10
    q2k[:, 9:16, :] = 11
    case.with_gpu(q2k_indices=q2k.to(DEVICE))


@pytest.mark.parametrize("spec", SORTED_PLAN_CASES, ids=lambda s: s[0])
def test_sorted_warp_plan_equals_block_wide_plan(spec, launch_overrides):
    label, lens_q, lens_k, hq, hkv, topk, q_offset, layout, garbage = spec
    case = make_case(f"sorted-plan-{label}", lens_q, lens_k, hq, hkv, topk, True, seed=61,
                     layout=layout, q_offset=q_offset)
    if garbage:
        q2k = garbage_indices(case.cpu["q2k_indices"], num_blocks_min=2,
                              generator=torch.Generator().manual_seed(5))
        case.with_gpu(q2k_indices=q2k.to(DEVICE))
    if label.endswith("speculation_misses"):
        _speculation_misses(case)
    sorted_in_warp = run_gpu(case)
    check_gpu_result(case, sorted_in_warp)
    if label.endswith("speculation_misses"):
        rows = slice(8, 16)
        assert bool((sorted_in_warp[0][rows] == 0).all()), f"[{case.name}] empty rows not 0"
        assert bool(torch.isneginf(sorted_in_warp[1][rows]).all()), f"[{case.name}] lse not -inf"
    launch_overrides(speculate=0)
    unspeculated = run_gpu(case)
    launch_overrides(warp_plan=2)
    network = run_gpu(case)
    launch_overrides(warp_plan=0)
    block_wide = run_gpu(case)
    for what, a, b, c, d in zip(("out", "lse", "lse_t"), sorted_in_warp, unspeculated, network,
                                block_wide):
        assert_bitwise(case.name, f"warp plan's {what} vs without speculation", a, b)
        assert_bitwise(case.name, f"warp plan's {what} vs its sorting network's", a, c)
        assert_bitwise(case.name, f"warp plan's {what} vs the block-wide plan's", a, d)


# A paged call whose page table is wider than the warp plan's bitmap reaches (more than 45056
# blocks a request, 5.7M keys) plans through the sorting network instead (launch.cu's
# warp_plan_kind): the host cannot bound a request's length by anything narrower. Columns of -1
# past the requests' pages change nothing else, so the result equals the narrow table's bitwise.
def test_wide_page_table_plans_through_the_network():
    case = make_case("wide-page-table-mtp", [8, 8, 8], [3000, 700, 9000], 64, 4, 16, True,
                     seed=67, layout="paged")
    narrow = run_gpu(case)
    check_gpu_result(case, narrow)
    table = case.cpu["page_table"]
    wide = torch.full((table.shape[0], 50000), -1, dtype=table.dtype)
    wide[:, :table.shape[1]] = table
    case.with_gpu(page_table=wide.to(DEVICE))
    got = run_gpu(case)
    for what, g, w in zip(("out", "lse", "lse_t"), got, narrow):
        assert_bitwise(case.name, f"{what} with a 50000-column page table vs the narrow one", g, w)


# The K/V tensor maps' L2 promotion (the l2_promotion override: 0 none, the default; 1 128 B;
# 2 256 B) changes how L2 fetches the boxes, never what lands in shared memory, so every
# setting gives the same bits. (name, q lens, k lens, Hq, Hkv, topk, layout): one-token decode
# (split, paged, ragged below and past one block), multi-token prediction, flat prefill.
PROMOTION_CASES = [
    ("m3_decode_paged", [1, 1, 1], [77, 4097, 30000], 64, 4, 16, "paged"),
    ("m3_mtp_paged", [8, 8], [5000, 1300], 64, 4, 16, "paged"),
    ("m3_prefill_flat", [400], [2000], 64, 4, 16, "flat"),
]


@pytest.mark.parametrize("spec", PROMOTION_CASES, ids=lambda s: s[0])
def test_l2_promotion_changes_no_bits(spec, launch_overrides):
    label, lens_q, lens_k, hq, hkv, topk, layout = spec
    case = make_case(f"promotion-{label}", lens_q, lens_k, hq, hkv, topk, True, seed=71,
                     layout=layout)
    default = run_gpu(case)
    check_gpu_result(case, default)
    for setting in (1, 2):
        launch_overrides(l2_promotion=setting)
        promoted = run_gpu(case)
        for what, a, b in zip(("out", "lse", "lse_t"), promoted, default):
            assert_bitwise(case.name, f"{what} with L2 promotion {setting} vs none", a, b)
