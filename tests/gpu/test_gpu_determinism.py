"""Run-to-run determinism and CUDA graphs (contract sections 6 and 9): two calls on identical
inputs are bitwise equal, and a captured call replays to the eager result bitwise, with scratch
from PyTorch's allocator or from a warmed MSASparseAttentionWorkspace."""
import math

import pytest
import torch

import flashmsa
from gpu_harness import (DEVICE, DTYPES, assert_bitwise, capture_graph, check_gpu_result,
                         dtype_id, make_case, replay, run_gpu)

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
