"""flashmsa.integrations.vllm on CUDA tensors: the CPU suite's comparisons with the independent
evaluation of vLLM's semantics (tests/python/test_vllm_integration.py, whose case builders and
evaluation this file reuses), each call made with PyTorch's synchronisation check set to raise,
plus MiniMax-M3's production heads, and decode steps captured in a CUDA graph and replayed on new
inputs copied into the captured buffers, equal to eager calls bitwise.

fp8 caches with per-(KV head, token slot) k_scale / v_scale, (num_kv_heads, num_blocks * 128)
float32 (slot = cache block * 128 + token in block), which the Hopper kernels apply to the
scores and the probabilities: the CPU suite's per-token cases and MiniMax-M3 production shapes
(chunked prefill, one-token decode, multi-token prediction, a long-context decode whose KV is
split, a ragged batch) against the vLLM evaluation and the CPU backend; decode steps captured
with per-token scales and replayed on new inputs and new scale values; a captured prefill call
replayed after new scale values are written into the captured scale tensors."""
import contextlib
import math

import pytest
import torch

import flashmsa
import flashmsa.integrations.vllm as vllm_ops
from gpu_harness import DEVICE, assert_bitwise, capture_graph, replay, synchronize
from test_vllm_integration import (DECODE_CASES, MAX_ABS_ERROR, MAX_REL_L2_ERROR,
                                   PER_TOKEN_DECODE_CASES, PER_TOKEN_PREFILL_CASES,
                                   PREFILL_CASES, args_on, case_id, check_against_vllm,
                                   decode_args, error_stats, prefill_args, run_integration,
                                   vllm_decode_reference, vllm_prefill_reference)

PRODUCTION_HEADS = dict(num_heads=64, num_kv_heads=4, topk=16)
FP8 = torch.float8_e4m3fn
PER_TOKEN = dict(cache_dtype=FP8, scale="per_token")


@contextlib.contextmanager
def no_host_synchronisation():
    """Any PyTorch operation that synchronises the host with the device raises (an engine's
    CUDA graphs and its asynchronous scheduling need none)."""
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def call_without_sync(op, args, output):
    with no_host_synchronisation():
        return op(**args, output=output)


def _bytes(x):
    return x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x


def check_gpu(name, op, args, reference):
    """One call on the GPU: written in place without a host synchronisation, within contract
    section 7 of the vLLM evaluation (0 on the rows vLLM leaves undefined), within the same
    bounds of the CPU backend's run of the same integration, and its inputs untouched."""
    before = {key: _bytes(value).clone() for key, value in args.items()
              if isinstance(value, torch.Tensor)}
    output = run_integration(op, args, name, call=call_without_sync)
    synchronize(name)
    check_against_vllm(name, output, reference(args))
    cpu_output = run_integration(op, args_on(args, "cpu"), f"{name} on the CPU")
    max_abs, rel_l2 = error_stats(output.cpu(), cpu_output)
    assert max_abs < MAX_ABS_ERROR and rel_l2 < MAX_REL_L2_ERROR, (
        f"[{name}] GPU vs CPU backend: max abs {max_abs:.3e}, rel L2 {rel_l2:.3e}")
    for key, value in before.items():
        assert torch.equal(_bytes(args[key]), value), f"[{name}] input {key} changed"
    return output


@pytest.mark.parametrize("case", PREFILL_CASES, ids=case_id)
def test_gpu_prefill_matches_vllm(case):
    name, options = case
    check_gpu(f"gpu-prefill-{name}", vllm_ops.minimax_m3_sparse_attn,
              prefill_args(**options, device=DEVICE), vllm_prefill_reference)


@pytest.mark.parametrize("case", DECODE_CASES, ids=case_id)
def test_gpu_decode_matches_vllm(case):
    name, options = case
    check_gpu(f"gpu-decode-{name}", vllm_ops.minimax_m3_sparse_attn_decode,
              decode_args(**options, device=DEVICE), vllm_decode_reference)


PRODUCTION_PREFILL = [
    ("chunked-bf16", dict(q_lens=[300, 129], prefix_lens=[0, 6000])),
    ("chunked-fp8-scalar-scales", dict(q_lens=[200, 64], prefix_lens=[2000, 9000],
                                       cache_dtype=torch.float8_e4m3fn, scale="scalar", seed=1)),
]
PRODUCTION_DECODE = [
    ("one-token-fp16", dict(seq_lens=[20000, 4097, 1000, 129, 128, 127, 7, 1],
                            dtype=torch.float16)),
    ("mtp-2-fp8-scalar-scales", dict(seq_lens=[20000, 4097, 1000, 129, 0],
                                     decode_query_len=2, cache_dtype=torch.float8_e4m3fn,
                                     scale="scalar", seed=1)),
    ("ragged-bf16", dict(seq_lens=[9000, 300, 5, 2000], query_lens=[3, 1, 2, 0],
                         padded_rows=2, seed=2)),
]


@pytest.mark.parametrize("case", PRODUCTION_PREFILL, ids=case_id)
def test_gpu_prefill_production_heads(case):
    name, options = case
    check_gpu(f"gpu-prefill-64x4-topk16-{name}", vllm_ops.minimax_m3_sparse_attn,
              prefill_args(**options, **PRODUCTION_HEADS, device=DEVICE),
              vllm_prefill_reference)


@pytest.mark.parametrize("case", PRODUCTION_DECODE, ids=case_id)
def test_gpu_decode_production_heads(case):
    name, options = case
    check_gpu(f"gpu-decode-64x4-topk16-{name}", vllm_ops.minimax_m3_sparse_attn_decode,
              decode_args(**options, **PRODUCTION_HEADS, device=DEVICE), vllm_decode_reference)


# Decode steps for the graph tests: step B's KV lengths are step A's reversed, so every shape
# (cache blocks and block-table width included) matches.
GRAPH_STEPS = {
    "one-token": dict(seq_lens=[20000, 4097, 1000, 129, 128, 127, 7, 0]),
    "mtp-3": dict(seq_lens=[9000, 2049, 300, 3], decode_query_len=3),
    "ragged": dict(seq_lens=[9000, 2049, 300, 5], query_lens=[3, 1, 0, 2], padded_rows=2),
}


GRAPH_CACHES = {"bf16": {}, "fp8-scalar-scales": dict(cache_dtype=FP8, scale="scalar"),
                "fp8-per-token-scales": PER_TOKEN}


@pytest.mark.parametrize("scratch", ["allocator", "workspace"])
@pytest.mark.parametrize("cache", sorted(GRAPH_CACHES))
@pytest.mark.parametrize("form", sorted(GRAPH_STEPS))
def test_gpu_decode_graph_replay_with_new_inputs(form, cache, scratch):
    """Capture one decode call on step A's buffers, copy step B's inputs (q, cache contents,
    indices, block table, lengths, and for fp8 new scale values: one-element or per-token) into
    them, replay: equal to an eager call on B bitwise, and right against the vLLM evaluation."""
    options = dict(GRAPH_STEPS[form], **PRODUCTION_HEADS, **GRAPH_CACHES[cache])
    name = f"gpu-decode-graph-{form}-{cache}-{scratch}"
    step_a = decode_args(**options, seed=31, device=DEVICE)
    step_b = decode_args(**dict(options, seq_lens=list(reversed(options["seq_lens"]))),
                         seed=32, device=DEVICE)
    if cache == "fp8-scalar-scales":
        # A graph must read the scales' values at replay, not the ones captured.
        step_b["k_scale"].fill_(0.5)
        step_b["v_scale"].fill_(1.5)
    elif cache == "fp8-per-token-scales":
        # Step B's per-token scales were drawn afresh (seed 32): every slot's value changes.
        for key in ("k_scale", "v_scale"):
            assert step_b[key].shape == step_a[key].shape == (
                step_a["kv_cache"].shape[1], step_a["kv_cache"].shape[0] * 128), (
                f"[{name}] {key} is not (num_kv_heads, num_blocks * 128)")
            assert not torch.equal(step_b[key], step_a[key]), f"[{name}] {key} unchanged"
    for key, value in step_b.items():
        if isinstance(value, torch.Tensor):
            assert value.shape == step_a[key].shape, f"[{name}] {key} shapes differ"
    workspace = flashmsa.MSASparseAttentionWorkspace(DEVICE) if scratch == "workspace" else None
    op = vllm_ops.minimax_m3_sparse_attn_decode
    static = step_a
    output = torch.full_like(static["q"], math.nan)

    def call():
        return op(**static, output=output, workspace=workspace)

    graph, captured = capture_graph(name, call)
    assert captured is output, f"[{name}] the captured call did not return its output tensor"
    for key, value in step_b.items():
        if isinstance(value, torch.Tensor):
            _bytes(static[key]).copy_(_bytes(value))
    replay(name, graph, [captured])

    def eager(op_, args, out):
        return op_(**args, output=out, workspace=workspace)

    eager_b = run_integration(op, step_b, name, call=eager)
    synchronize(name)
    assert_bitwise(name, "replay on new inputs vs eager", captured, eager_b)
    check_against_vllm(name, eager_b, vllm_decode_reference(step_b))


# ---------------------------------------------------------------------------------------------
# Per-(KV head, token slot) fp8 scales
# ---------------------------------------------------------------------------------------------

PER_TOKEN_PRODUCTION_PREFILL = [
    ("chunked-bf16", dict(q_lens=[200, 64], prefix_lens=[2000, 9000], seed=41)),
    ("first-and-late-chunks-fp16", dict(q_lens=[300, 129], prefix_lens=[0, 6000],
                                        dtype=torch.float16, seed=42)),
]
PER_TOKEN_PRODUCTION_DECODE = [
    # the one-token kernel, ragged lengths around block edges
    ("one-token-bf16", dict(seq_lens=[20000, 4097, 1000, 129, 128, 127, 7, 1], seed=43)),
    # multi-token prediction with a CUDA-graph padding request (seq_lens 0)
    ("mtp-2-fp16", dict(seq_lens=[20000, 4097, 1000, 129, 0], decode_query_len=2,
                        dtype=torch.float16, seed=44)),
    # a long context at batch 2: the one-token kernel splits each row's blocks
    ("long-context-splits", dict(seq_lens=[40000, 9000], seed=45)),
    # 8-token multi-token prediction (fp8: the one-token kernel, one CTA a row)
    ("mtp-8", dict(seq_lens=[9000, 3000, 1500, 300, 129, 8, 5000, 2049], decode_query_len=8,
                   seed=46)),
    ("ragged", dict(seq_lens=[9000, 300, 5, 2000], query_lens=[3, 1, 2, 0], padded_rows=2,
                    seed=47)),
]


def _check_per_token_scales(name, args):
    """The case really has per-token scales: (num_kv_heads, num_blocks * 128) float32 on the
    device, not all equal."""
    cache = args["kv_cache"]
    assert cache.dtype == FP8, f"[{name}] the cache is {cache.dtype}, not fp8"
    for key in ("k_scale", "v_scale"):
        scale = args[key]
        assert scale.dtype == torch.float32 and scale.device == cache.device, (
            f"[{name}] {key} is {scale.dtype} on {scale.device}")
        assert tuple(scale.shape) == (cache.shape[1], cache.shape[0] * 128), (
            f"[{name}] {key} has shape {tuple(scale.shape)}")
        assert float(scale.max()) > 4 * float(scale.min()), f"[{name}] {key} barely varies"


_PER_TOKEN_OPS = {
    "prefill": (prefill_args, vllm_ops.minimax_m3_sparse_attn, vllm_prefill_reference),
    "decode": (decode_args, vllm_ops.minimax_m3_sparse_attn_decode, vllm_decode_reference),
}


def _check_per_token_case(op_name, name, options, **extra):
    make_args, op, reference = _PER_TOKEN_OPS[op_name]
    args = make_args(**options, **PER_TOKEN, **extra, device=DEVICE)
    _check_per_token_scales(name, args)
    check_gpu(name, op, args, reference)


@pytest.mark.parametrize("case", PER_TOKEN_PREFILL_CASES, ids=case_id)
def test_gpu_prefill_per_token_scales(case):
    """test_per_token_scales_prefill on CUDA tensors: each key and value times the scale of its
    slot, block * 128 + token."""
    name, options = case
    _check_per_token_case("prefill", f"gpu-prefill-{name}", options)


@pytest.mark.parametrize("case", PER_TOKEN_DECODE_CASES, ids=case_id)
def test_gpu_decode_per_token_scales(case):
    name, options = case
    _check_per_token_case("decode", f"gpu-decode-{name}", options)


@pytest.mark.parametrize("case", PER_TOKEN_PRODUCTION_PREFILL, ids=case_id)
def test_gpu_prefill_per_token_scales_production_heads(case):
    name, options = case
    _check_per_token_case("prefill", f"gpu-prefill-64x4-topk16-per-token-{name}", options,
                          **PRODUCTION_HEADS)


@pytest.mark.parametrize("case", PER_TOKEN_PRODUCTION_DECODE, ids=case_id)
def test_gpu_decode_per_token_scales_production_heads(case):
    name, options = case
    _check_per_token_case("decode", f"gpu-decode-64x4-topk16-per-token-{name}", options,
                          **PRODUCTION_HEADS)


def _new_scale_values(args, seed):
    """Every slot's per-token scale times 2 ** U(-1, 1), written in place (the tensors a
    captured graph holds); returns the old values."""
    generator = torch.Generator().manual_seed(seed)
    old = {}
    for key in ("k_scale", "v_scale"):
        old[key] = args[key].clone()
        factor = torch.exp2(torch.rand(args[key].shape, generator=generator) * 2 - 1)
        args[key].mul_(factor.to(args[key].device))
    return old


@pytest.mark.parametrize("op_name", ["prefill", "decode"])
def test_gpu_per_token_scales_graph_replay_reads_them_in_place(op_name):
    """One call with per-token scales captured in a CUDA graph (MiniMax-M3 heads): the replay
    equals the eager call bitwise; after new values are written into the captured k_scale /
    v_scale, the replay equals an eager call on them bitwise, differs from the first result,
    and is right against the vLLM evaluation of the new values."""
    name = f"gpu-{op_name}-per-token-scales-graph"
    if op_name == "prefill":
        op, evaluate = vllm_ops.minimax_m3_sparse_attn, vllm_prefill_reference
        args = prefill_args([200, 64], [2000, 9000], **PER_TOKEN, **PRODUCTION_HEADS, seed=51,
                            device=DEVICE)
    else:
        op, evaluate = vllm_ops.minimax_m3_sparse_attn_decode, vllm_decode_reference
        args = decode_args([20000, 4097, 1000, 129, 0], decode_query_len=2, **PER_TOKEN,
                           **PRODUCTION_HEADS, seed=52, device=DEVICE)
    _check_per_token_scales(name, args)
    output = torch.full_like(args["q"], math.nan)

    def call():
        return op(**args, output=output)

    def eager(op_, call_args, out):
        return op_(**call_args, output=out)

    graph, captured = capture_graph(name, call)
    assert captured is output, f"[{name}] the captured call did not return its output tensor"
    replay(name, graph, [captured])
    first = captured.clone()
    assert_bitwise(name, "replay vs eager", first, run_integration(op, args, name, call=eager))
    check_against_vllm(name, first, evaluate(args))

    _new_scale_values(args, seed=53)
    replay(name, graph, [captured])
    replayed = captured.clone()
    want = run_integration(op, args, name, call=eager)
    synchronize(name)
    assert_bitwise(name, "replay after new scale values vs eager on them", replayed, want)
    assert not torch.equal(replayed, first), (
        f"[{name}] new scale values left the replayed output unchanged")
    check_against_vllm(f"{name}-new-scales", replayed, evaluate(args))
