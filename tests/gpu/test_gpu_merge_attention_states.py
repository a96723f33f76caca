"""flashmsa.merge_attention_states on CUDA tensors (torch operations on the current stream).

The CPU suite's context-parallel check, on the GPU: a case's selected blocks split into 2-4
disjoint subsets, each attended to by the Hopper kernels with return_softmax_lse=True, the
partials merged on the GPU and compared with one call over the union (lse within 1e-5
relative, -inf and out = 0 exactly where the union reads nothing, out within contract section 7
of the fp64 reference and of the union call) and with the library's CPU merge of the same
partials. Plus: out= / lse_out= in place, no host synchronisation, and CUDA-graph capture of the
merge (and of partial calls followed by the merge) replayed with new inputs equal to eager
calls. The helpers come from tests/python/test_merge_attention_states.py.
"""
import math

import pytest
import torch

import flashmsa
import test_merge_attention_states as cpu_suite
from flashmsa import _lib
from gpu_harness import (DEVICE, DTYPES, assert_bitwise, capture_graph, dtype_id, replay,
                         synchronize, to_device)

ALL_DTYPES = DTYPES + (torch.float32,)


def _dtype_id(dtype):
    return "fp32" if dtype == torch.float32 else dtype_id(dtype)


def gpu_split_case(case, dtype, parts, seed):
    """(CPU kwargs, GPU kwargs, the q2k pieces on the GPU) of a CPU-suite case."""
    cpu_kwargs = cpu_suite.build_split_case(case, dtype, seed=seed)
    pieces = cpu_suite.split_q2k(cpu_kwargs["q2k_indices"], parts, seed=seed)
    return cpu_kwargs, to_device(cpu_kwargs), [piece.to(DEVICE) for piece in pieces]


def check_against_cpu_merge(name, outs, lses, got_out, got_lse):
    """The GPU merge against the library's CPU merge of the same partials: the same -inf
    entries, lse within 1e-6 (relative above |lse| = 1), out within one ulp of its dtype plus a
    few fp32 ulps of the largest partial (the exponentials and the fused multiply-adds of the
    two may round differently)."""
    want_out, want_lse = flashmsa.merge_attention_states([x.cpu() for x in outs],
                                                         [x.cpu() for x in lses])
    got_out, got_lse = got_out.cpu(), got_lse.cpu()
    empty = torch.isneginf(want_lse)
    assert torch.equal(torch.isneginf(got_lse), empty), f"[{name}] -inf entries differ"
    assert bool((got_out[empty] == 0).all()), f"[{name}] rows that read nothing are not 0"
    error = ((got_lse - want_lse).abs() / want_lse.abs().clamp(min=1.0))[~empty]
    if error.numel():
        assert error.max().item() <= 1e-6, f"[{name}] lse vs CPU merge: {error.max().item():.3e}"
    eps = torch.finfo(got_out.dtype).eps
    diff = (got_out.double() - want_out.double()).abs()
    magnitude = torch.stack([x.cpu().double().abs() for x in outs]).amax(0)
    # One ulp of the dtype: eps relative, or the spacing of subnormals (fp16 has them here).
    ulp = torch.clamp(want_out.double().abs(), min=torch.finfo(got_out.dtype).smallest_normal) * eps
    bound = ulp + 16 * len(outs) * 2 ** -24 * magnitude
    assert bool((diff <= bound).all()), (
        f"[{name}] out vs CPU merge: max |diff| {diff.max().item():.3e}, worst excess "
        f"{(diff - bound).max().item():.3e}")


@pytest.mark.parametrize("parts", [2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", sorted(cpu_suite.CASES))
def test_merge_of_partials_is_the_union_call(case, dtype, parts):
    name = f"gpu-{case}-{dtype_id(dtype)}-parts{parts}"
    _, kwargs, pieces = gpu_split_case(case, dtype, parts, seed=parts)
    union_out, union_lse = flashmsa.msa_sparse_attention(**kwargs, return_softmax_lse=True)
    outs, lses = cpu_suite.partial_states(kwargs, pieces)
    merged, merged_lse = flashmsa.merge_attention_states(outs, lses)
    synchronize(name)
    assert merged.device == union_out.device and merged_lse.device == union_out.device
    empty = cpu_suite.check_merged(name, kwargs, merged, merged_lse, union_out, union_lse)
    assert bool(empty.any()), f"[{name}] no (row, head) reads nothing"
    partial_empty = torch.stack([torch.isneginf(lse).cpu() for lse in lses]).any(0)
    assert bool((partial_empty & ~empty).any()), (
        f"[{name}] no (row, head) where only some partials read nothing")
    check_against_cpu_merge(name, outs, lses, merged, merged_lse)


@pytest.mark.parametrize("count", [1, 2, 5])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_dtype_id)
def test_random_states_against_the_cpu_merge(dtype, count):
    outs, lses = cpu_suite.random_states(count, 300, 8, 128, dtype, seed=count, device=DEVICE)
    out, lse = flashmsa.merge_attention_states(outs, lses)
    synchronize("random_states")
    assert out.dtype == dtype and lse.dtype == torch.float32
    check_against_cpu_merge(f"random-{_dtype_id(dtype)}-{count}", outs, lses, out, lse)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_in_place_out_and_lse_out(dtype):
    name = f"in_place-{dtype_id(dtype)}"
    _, kwargs, pieces = gpu_split_case("causal_offset", dtype, 3, seed=5)
    outs, lses = cpu_suite.partial_states(kwargs, pieces)
    want_out, want_lse = flashmsa.merge_attention_states(outs, lses)
    out = torch.full_like(outs[0], math.nan)
    lse_out = torch.full_like(lses[0], math.nan)
    got_out, got_lse = flashmsa.merge_attention_states(outs, lses, out=out, lse_out=lse_out)
    synchronize(name)
    assert got_out is out and got_lse is lse_out, "out= and lse_out= must be returned"
    assert_bitwise(name, "out=", out, want_out)
    assert_bitwise(name, "lse_out=", lse_out, want_lse)
    # Strided views of bigger buffers.
    big = torch.full((outs[0].shape[0], outs[0].shape[1] + 2, 160), math.nan, dtype=dtype,
                     device=DEVICE)
    view = big[:, 1:-1, 16:144]
    lse_view = torch.full((lses[0].shape[1], lses[0].shape[0]), math.nan, device=DEVICE).t()
    flashmsa.merge_attention_states(outs, lses, out=view, lse_out=lse_view)
    synchronize(name)
    assert_bitwise(name, "strided out=", view, want_out)
    assert_bitwise(name, "strided lse_out=", lse_view, want_lse)
    assert bool(big[:, 0].isnan().all() and big[:, :, :16].isnan().all()), "wrote outside out"
    # Into the first partial itself.
    first_out, first_lse = outs[0].clone(), lses[0].clone()
    flashmsa.merge_attention_states([first_out] + outs[1:], [first_lse] + lses[1:],
                                    out=first_out, lse_out=first_lse)
    synchronize(name)
    assert_bitwise(name, "out=outs[0]", first_out, want_out)
    assert_bitwise(name, "lse_out=lses[0]", first_lse, want_lse)


def test_weightless_states_and_extreme_inputs_give_no_nan():
    outs, lses = cpu_suite.random_states(3, 64, 4, 128, torch.bfloat16, seed=6, device=DEVICE)
    want_out, want_lse = flashmsa.merge_attention_states(outs, lses)
    dirty = [x.clone() for x in outs]
    for partial, lse in zip(dirty, lses):
        partial[torch.isneginf(lse)] = math.nan  # an output nobody wrote
    out, lse = flashmsa.merge_attention_states(dirty, lses)
    synchronize("weightless")
    assert_bitwise("weightless", "out", out, want_out)
    assert_bitwise("weightless", "lse", lse, want_lse)

    big = torch.finfo(torch.float32).max
    rows = [[big, -big, 0.0], [-big, -big, -math.inf], [1e30, 1e30 - 1e24, -1e30],
            [88.0, 89.0, -104.0], [-math.inf, -math.inf, -math.inf]]
    lses = [torch.tensor([[row[i]] for row in rows], device=DEVICE) for i in range(3)]
    outs = [torch.full((len(rows), 1, 128), value, dtype=torch.float16, device=DEVICE)
            for value in (65504.0, -65504.0, 1.0)]
    out, lse = flashmsa.merge_attention_states(outs, lses)
    synchronize("extreme")
    assert bool(torch.isfinite(out.float()).all()), "NaN/inf in out"
    assert bool(torch.isfinite(lse[:-1]).all()) and bool(torch.isneginf(lse[-1]).all())
    assert bool((out[-1] == 0).all())


def test_no_host_synchronisation():
    outs, lses = cpu_suite.random_states(4, 128, 8, 128, torch.bfloat16, seed=7, device=DEVICE)
    out, lse_out = torch.empty_like(outs[0]), torch.empty_like(lses[0])
    flashmsa.merge_attention_states(outs, lses)  # anything lazy happens before the check
    synchronize("no_sync")
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        flashmsa.merge_attention_states(outs, lses)
        flashmsa.merge_attention_states(outs, lses, out=out, lse_out=lse_out)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    synchronize("no_sync")


@pytest.mark.parametrize("into", ["given", "allocated"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_dtype_id)
def test_graph_replay_with_new_inputs_equals_eager(dtype, into):
    name = f"graph-{_dtype_id(dtype)}-{into}"
    outs, lses = cpu_suite.random_states(3, 200, 8, 128, dtype, seed=10, device=DEVICE)
    static_outs = [x.clone() for x in outs]
    static_lses = [x.clone() for x in lses]
    out = torch.empty_like(outs[0]) if into == "given" else None
    lse_out = torch.empty_like(lses[0]) if into == "given" else None

    def merge():
        return flashmsa.merge_attention_states(static_outs, static_lses, out=out,
                                               lse_out=lse_out)

    graph, captured = capture_graph(name, merge)
    for seed in (11, 12):
        new_outs, new_lses = cpu_suite.random_states(3, 200, 8, 128, dtype, seed=seed,
                                                     device=DEVICE)
        # Other rows read nothing than at capture time.
        new_lses[1][seed % 7::5] = -math.inf
        for static, new in zip(static_outs + static_lses, new_outs + new_lses):
            static.copy_(new)
        replay(name, graph, captured)
        want_out, want_lse = flashmsa.merge_attention_states(new_outs, new_lses)
        synchronize(name)
        assert_bitwise(name, f"replayed out (inputs of seed {seed})", captured[0], want_out)
        assert_bitwise(name, f"replayed lse (inputs of seed {seed})", captured[1], want_lse)


def test_graph_of_partial_calls_and_merge():
    """The context-parallel step in one graph: the partial calls, then their merge. Replayed
    with new queries it equals the same calls made eagerly, bitwise (contract section 6:
    identical inputs give identical outputs)."""
    name = "graph-partials-merge"
    _, kwargs, pieces = gpu_split_case("full", torch.bfloat16, 3, seed=13)
    static_q = kwargs["q"].clone()

    def step():
        outs, lses = cpu_suite.partial_states(dict(kwargs, q=static_q), pieces)
        return flashmsa.merge_attention_states(outs, lses)

    graph, captured = capture_graph(name, step)
    generator = torch.Generator().manual_seed(14)
    new_q = (torch.randn(static_q.shape, generator=generator) / 3).to(static_q.dtype).to(DEVICE)
    static_q.copy_(new_q)
    replay(name, graph, captured)
    outs, lses = cpu_suite.partial_states(dict(kwargs, q=new_q), pieces)
    want_out, want_lse = flashmsa.merge_attention_states(outs, lses)
    synchronize(name)
    assert_bitwise(name, "replayed out", captured[0], want_out)
    assert_bitwise(name, "replayed lse", captured[1], want_lse)
    union_out, union_lse = flashmsa.msa_sparse_attention(**dict(kwargs, q=new_q),
                                                         return_softmax_lse=True)
    cpu_suite.check_lse_matches(name, captured[1], union_lse)


def test_device_errors():
    outs, lses = cpu_suite.random_states(2, 8, 2, 128, torch.bfloat16, seed=15, device=DEVICE)
    cases = [
        ("outs[1]", [outs[0], outs[1].cpu()], lses, {}),
        ("lses[0]", outs, [lses[0].cpu(), lses[1]], {}),
        ("out", outs, lses, {"out": torch.empty_like(outs[0], device="cpu")}),
        ("lse_out", outs, lses, {"lse_out": torch.empty_like(lses[0], device="cpu")}),
    ]
    if torch.cuda.device_count() > 1:
        cases.append(("outs[1]", [outs[0], outs[1].to("cuda:1")], lses, {}))
    for argument, case_outs, case_lses, given in cases:
        with pytest.raises(ValueError) as caught:
            flashmsa.merge_attention_states(case_outs, case_lses, **given)
        assert argument in str(caught.value), f"message does not name {argument}: {caught.value}"


def test_c_entry_on_cuda_is_not_supported_yet():
    """The C entry's CUDA path is planned: it says so, and that the Python function merges CUDA
    tensors with torch, before touching any memory."""
    outs, lses = cpu_suite.random_states(2, 8, 2, 128, torch.bfloat16, seed=16, device=DEVICE)
    out, lse_out = torch.full_like(outs[0], math.nan), torch.full_like(lses[0], math.nan)
    call = cpu_suite.CallArgs(outs, lses, out, lse_out)
    call.args.device = _lib.DEVICE_CUDA
    call.args.device_index = DEVICE.index or 0
    with pytest.raises(NotImplementedError, match="torch"):
        _lib.merge_attention_states(call.args)
    synchronize("c_entry_cuda")
    assert bool(out.isnan().all()) and bool(lse_out.isnan().all())
