"""The one-token decode kernel (src/sm90/decode_kernel.cuh) on the paths that the decode batches
of test_gpu_decode.py (paged, one row per request, M3 heads, causal, default offsets) do not
take:
- rows whose request is not the one of their own index: ragged query lengths that still sum to
  the batch size (the kernel's guess fails and it searches cu_seqlens_q), and a row outside
  every request (it reads nothing: out = 0, lse = -inf);
- flat K/V, explicit q_offset (an int and one per request), non-causal calls;
- topk 1, topk at the kernel's limit (32) and one past it (prefill_kernel), with garbage ids;
- group sizes 1 and 17 (17 is past the kernel's 16: prefill_kernel), fp16;
- the split reductions forced through the tune overrides (pull and push at two CTAs per SM);
- requests of 2, 4 and 8 rows, which the launch rule sends here while their rows fit one CTA
  per SM (the kernel each launch picks, checked by name), and the overrides past the rule;
- the split counts that the small-batch rule (launch.cu) picks at batch 4-11: 6, 4, 3 and 2
  splits of 16 blocks (some slices uneven);
- flat and paged calls on the same logical data, bitwise equal;
- requests of more than 1024 pages (past a page row cached in shared memory).
Each result is compared with the CPU backend and the fp64 reference (gpu_harness)."""
import pytest
import torch

from gpu_harness import (DEVICE, assert_bitwise, check_gpu_result, garbage_indices, make_case,
                         run_gpu)

M3 = dict(num_qo_heads=64, num_kv_heads=4)
LENGTHS = [30000, 0, 127, 4097, 129, 9000, 256, 20000]


@pytest.mark.parametrize("layout", ["paged", "flat"])
def test_one_token_ragged_rows(layout):
    """Eight rows over eight requests, but 0, 2, 1, 0, 3, 1, 0 and 1 rows each: most rows are
    not in the request of their index."""
    seqlens_q = [0, 2, 1, 0, 3, 1, 0, 1]
    case = make_case(f"one-token-ragged-{layout}", seqlens_q, LENGTHS, M3["num_qo_heads"],
                     M3["num_kv_heads"], 16, True, seed=201, layout=layout)
    check_gpu_result(case, run_gpu(case))


def test_one_token_row_outside_requests():
    """cu_seqlens_q = 1, 2, ..., 6, 6: row 0 belongs to no request (out = 0, lse = -inf), row t
    to request t - 1, and the last request has no row."""
    batch = 6
    case = make_case("one-token-row-outside", [1] * batch, LENGTHS[:batch], M3["num_qo_heads"],
                     M3["num_kv_heads"], 16, True, seed=202, layout="paged")
    cu_seqlens_q = torch.tensor(list(range(1, batch + 1)) + [batch], dtype=torch.int32)
    case.with_gpu(cu_seqlens_q=cu_seqlens_q.to(DEVICE))
    got = run_gpu(case)
    out, lse, lse_t = got
    assert bool((out[0] == 0).all()), f"[{case.name}] row 0 reads nothing: out must be 0"
    assert bool(torch.isneginf(lse[0]).all() and torch.isneginf(lse_t[0]).all()), (
        f"[{case.name}] row 0 reads nothing: lse and lse_t must be -inf")
    # The fp64 reference maps rows to requests by cu_seqlens_q[1:], which places row 0 in
    # request 0: it evaluates rows 1.. only; the CPU backend is compared on every row.
    check_gpu_result(case, got, rows=torch.arange(1, batch, device=DEVICE))


def test_one_token_pages_past_the_cached_row():
    """Requests of 140000 and 131073 keys have 1094 and 1025 pages. A kernel may keep a page-table
    row's first 1024 pages in shared memory (one per thread of four warps, eight each) and look
    the rest up in global memory: each row's own block (always selected) is past that, the
    second one exactly at it."""
    lengths = [140000, 600, 131073]
    case = make_case("one-token-pages-past-cached-row", [1] * len(lengths), lengths,
                     M3["num_qo_heads"], M3["num_kv_heads"], 16, True, seed=207, layout="paged")
    assert case.cpu["page_table"].shape[1] > 1024, (
        f"[{case.name}] the page table must be wider than 1024 pages: "
        f"{tuple(case.cpu['page_table'].shape)}")
    check_gpu_result(case, run_gpu(case))


OFFSETS = {"non-causal": (None, False), "int": (5000, True),
           "per-request": ([0, 7, -3, 40000, 129, 4096, 300, 19999], True)}


@pytest.mark.parametrize("offsets", sorted(OFFSETS))
def test_one_token_flat_offsets(offsets):
    q_offset, causal = OFFSETS[offsets]
    case = make_case(f"one-token-flat-offsets-{offsets}", [1] * len(LENGTHS), LENGTHS,
                     M3["num_qo_heads"], M3["num_kv_heads"], 16, causal, seed=203,
                     layout="flat", q_offset=q_offset)
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("topk", [1, 32, 33])
def test_one_token_topk_limits_garbage_indices(topk):
    """topk 1 (one lane, one split); 32 fills the planning warp's lanes; 33 runs prefill_kernel.
    Garbage ids (contract section 4: huge, negative mid-list, duplicated, unsorted, past the
    request) in all three."""
    lengths = [30000, 9000, 4097, 129, 20000, 5000, 300]
    case = make_case(f"one-token-topk{topk}-garbage", [1] * len(lengths), lengths,
                     M3["num_qo_heads"], M3["num_kv_heads"], topk, True, seed=204 + topk,
                     layout="paged")
    if topk > 1:
        q2k = garbage_indices(case.cpu["q2k_indices"], num_blocks_min=2,
                              generator=torch.Generator().manual_seed(topk))
    else:  # one entry: a negative one (nothing read) or a huge one (ignored)
        q2k = case.cpu["q2k_indices"].clone()
        q2k[:, 0::3, 0] = -1
        q2k[:, 1::3, 0] = 2 ** 31 - 1
    case.with_gpu(q2k_indices=q2k.to(DEVICE))
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("heads", [(4, 4), (68, 4)], ids=["g1", "g17"])
def test_one_token_group_size_edges_fp16(heads):
    num_qo_heads, num_kv_heads = heads
    case = make_case(f"one-token-hq{num_qo_heads}-hkv{num_kv_heads}-fp16", [1] * 5,
                     LENGTHS[:5], num_qo_heads, num_kv_heads, 16, True, dtype=torch.float16,
                     seed=206, layout="paged")
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("batch", [1, 5])
def test_one_token_flat_equals_paged(batch):
    """Same logical data (same seed) through a flat and a paged cache: bitwise equal outputs
    (contract section 6), at batch 1 (eight splits in a cluster) and 5."""
    lengths = LENGTHS[:batch] if batch > 1 else [30000]
    flat = make_case(f"one-token-flat-b{batch}", [1] * batch, lengths, M3["num_qo_heads"],
                     M3["num_kv_heads"], 16, True, seed=207, layout="flat")
    paged = make_case(f"one-token-paged-b{batch}", [1] * batch, lengths, M3["num_qo_heads"],
                      M3["num_kv_heads"], 16, True, seed=207, layout="paged")
    got_flat, got_paged = run_gpu(flat), run_gpu(paged)
    for what, a, b in zip(("out", "lse", "lse_t"), got_paged, got_flat):
        assert_bitwise(paged.name, f"{what}: paged vs flat", a, b)
    check_gpu_result(paged, got_paged)


# (splits, deep_pipeline, cluster, push): the launch overrides (flashmsa.testing)
REDUCTIONS = {"pull-two-per-sm": (8, 0, 1, 0), "push-two-per-sm": (3, 0, 1, 1),
              "push-two-per-sm-16": (16, 0, 1, 1), "push-two-per-sm-7": (7, 0, 1, 1),
              "push-one-per-sm": (2, 1, 1, 1), "push-one-per-sm-5": (5, 1, 1, 1),
              "workspace-merge": (3, 0, 0, 1)}


@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
def test_one_token_reduction_paths(reduction, launch_overrides):
    """The split reductions that the H200's default split rule never picks for this kernel but
    other SM counts and the cluster-residency fallback can, forced through the launch
    overrides: the push at two CTAs per SM (beside the one stage) and at one per SM,
    with split counts that own 1, 2, 3, 4 and 8 of the 16 rows, some unevenly; the pull; and
    splits outside a cluster whose partials the merge kernel combines from the workspace.
    Temperature LSEs included."""
    splits, deep_pipeline, cluster, push = REDUCTIONS[reduction]
    launch_overrides(splits=splits, deep_pipeline=deep_pipeline, cluster=cluster, push=push)
    case = make_case(f"one-token-{reduction}", [1] * 5, LENGTHS[:5], M3["num_qo_heads"],
                     M3["num_kv_heads"], 16, True, seed=208, layout="paged",
                     scalars=dict(lse_temperature_scale=0.7))
    check_gpu_result(case, run_gpu(case))


# The launch caps one-token grids of short splits at 17/20 of the SMs' worth of CTAs
# (split_rules.h): batch 4 runs 6 splits (slices of 2 and 3 blocks), 5 and 6 run 4, 8 runs 3
# (slices of 5 and 6), 10 and 11 run 2, on the H200's 132 SMs. Ragged KV lengths, so some
# requests have fewer blocks than splits.
@pytest.mark.parametrize("batch", [4, 5, 6, 8, 10, 11])
def test_one_token_small_batch_splits(batch):
    lengths = (LENGTHS * 2)[:batch]
    case = make_case(f"one-token-small-batch-b{batch}", [1] * batch, lengths,
                     M3["num_qo_heads"], M3["num_kv_heads"], 16, True, seed=230 + batch,
                     layout="paged", scalars=dict(lse_temperature_scale=0.7))
    check_gpu_result(case, run_gpu(case))


# KV lengths of the multi-row calls' requests: below 128, not multiples of 128, past 1024 pages.
MULTI_ROW_LENGTHS = [30000, 4097, 129, 9000, 77, 140000, 256, 20000] * 2


def check_multi_row_call(name, batch, qlen, seed, kernel):
    """Batch requests of qlen rows each: the call launches `kernel` (by name, through the
    profiler) and is right."""
    from torch.profiler import ProfilerActivity, profile
    case = make_case(name, [qlen] * batch, MULTI_ROW_LENGTHS[:batch], M3["num_qo_heads"],
                     M3["num_kv_heads"], 16, True, seed=seed, layout="paged")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        got = run_gpu(case)
    names = {event.key for event in prof.key_averages() if event.device_type.name == "CUDA"}
    assert any(kernel in name for name in names), \
        f"[{case.name}] expected {kernel}, launched {sorted(names)}"
    check_gpu_result(case, got)


# (requests, rows per request) on both sides of the launch rule on the H200's 132 SMs: rows x
# 4 KV heads <= SMs take the one-token kernel, one CTA per row (src/sm90/split_rules.h).
MULTI_ROW_CALLS = [(4, 8), (5, 8), (1, 2), (16, 2), (2, 4), (16, 4)]


@pytest.mark.parametrize("batch,qlen", MULTI_ROW_CALLS)
def test_one_token_kernel_for_multi_row_requests(batch, qlen):
    """Multi-token prediction at small batches runs here by default, each row its own tile: the
    row's request is never its own index, so every plan takes the search, and rows of one
    request have their own causal positions. Past one CTA per SM the two-consumer kernel takes
    the call."""
    sms = torch.cuda.get_device_properties(DEVICE).multi_processor_count
    kernel = "decode_kernel" if batch * qlen * M3["num_kv_heads"] <= sms else "prefill_kernel"
    check_multi_row_call(f"multi-row-b{batch}-q{qlen}", batch, qlen, 209 + qlen + batch, kernel)


@pytest.mark.parametrize("mode,batch", [(2, 8), (0, 2)])
def test_multi_row_requests_forced(mode, batch, launch_overrides):
    """The decode_kernel=2 override sends any call of at most 8 rows per request to the one-token
    kernel (batch 8 x 8 rows: two CTAs per SM), and 0 keeps small multi-token calls on the
    two-consumer kernel's split launch (batch 2: its merge kernel), the paths the rule leaves."""
    launch_overrides(decode_kernel=mode)
    kernel = "decode_kernel" if mode == 2 else "prefill_kernel"
    check_multi_row_call(f"multi-row-forced-{mode}-b{batch}", batch, 8, 219 + batch, kernel)
