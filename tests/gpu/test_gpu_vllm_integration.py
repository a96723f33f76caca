"""flashmsa.integrations.vllm on CUDA tensors: the CPU suite's comparisons with the independent
evaluation of vLLM's semantics (tests/python/test_vllm_integration.py, whose case builders and
evaluation this file reuses), each call made with PyTorch's synchronisation check set to raise,
plus MiniMax-M3's production heads, and decode steps captured in a CUDA graph and replayed on new
inputs copied into the captured buffers, equal to eager calls bitwise."""
import contextlib
import math

import pytest
import torch

import flashmsa
import flashmsa.integrations.vllm as vllm_ops
from gpu_harness import DEVICE, assert_bitwise, capture_graph, replay, synchronize
from test_vllm_integration import (BLOCK, DECODE_CASES, MAX_ABS_ERROR, MAX_REL_L2_ERROR,
                                   NUM_KV_HEADS, PREFILL_CASES, args_on, case_id,
                                   check_against_vllm, decode_args, error_stats, prefill_args,
                                   run_integration, vllm_decode_reference,
                                   vllm_prefill_reference)

PRODUCTION_HEADS = dict(num_heads=64, num_kv_heads=4, topk=16)


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


@pytest.mark.parametrize("scratch", ["allocator", "workspace"])
@pytest.mark.parametrize("cache", ["bf16", "fp8-scalar-scales"])
@pytest.mark.parametrize("form", sorted(GRAPH_STEPS))
def test_gpu_decode_graph_replay_with_new_inputs(form, cache, scratch):
    """Capture one decode call on step A's buffers, copy step B's inputs (q, cache contents,
    indices, block table, lengths, and for fp8 new scale values) into them, replay: equal to an
    eager call on B bitwise, and right against the vLLM evaluation."""
    options = dict(GRAPH_STEPS[form], **PRODUCTION_HEADS)
    if cache != "bf16":
        options.update(cache_dtype=torch.float8_e4m3fn, scale="scalar")
    name = f"gpu-decode-graph-{form}-{cache}-{scratch}"
    step_a = decode_args(**options, seed=31, device=DEVICE)
    step_b = decode_args(**dict(options, seq_lens=list(reversed(options["seq_lens"]))),
                         seed=32, device=DEVICE)
    if cache != "bf16":
        # A graph must read the scales' values at replay, not the ones captured.
        step_b["k_scale"].fill_(0.5)
        step_b["v_scale"].fill_(1.5)
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


@pytest.mark.parametrize("op_name", ["prefill", "decode"])
def test_gpu_per_token_scales_raise_not_implemented(op_name):
    """The integration maps per-token scales onto flashmsa's, which the Hopper kernels do not
    run yet: flashmsa refuses them before any work."""
    name = f"gpu-{op_name}-per-token-scales"
    if op_name == "prefill":
        args = prefill_args([4], [100], cache_dtype=torch.float8_e4m3fn, device=DEVICE)
        op = vllm_ops.minimax_m3_sparse_attn
    else:
        args = decode_args([100, 300], cache_dtype=torch.float8_e4m3fn, device=DEVICE)
        op = vllm_ops.minimax_m3_sparse_attn_decode
    slots = args["kv_cache"].shape[0] * BLOCK
    args["k_scale"] = torch.ones(NUM_KV_HEADS, slots, device=DEVICE)
    args["v_scale"] = torch.ones(NUM_KV_HEADS, slots, device=DEVICE)
    output = torch.full_like(args["q"], math.nan)
    with pytest.raises(NotImplementedError, match="k_scale") as raised:
        op(**args, output=output)
    assert "one-element" in str(raised.value), f"[{name}] the error does not say what works"
    synchronize(name)
    assert bool(output.isnan().all()), f"[{name}] output was written before the error"
