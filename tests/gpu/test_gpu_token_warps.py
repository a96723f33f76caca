"""The two-consumer fp8 prefill kernel's token-warp consumer (src/sm90/token_warp_consumer.cuh),
the launch plan's choice for fp8 K/V there, forced by the launch override token_warps=1 (and 0,
the union tile with its rewrite, for comparison): every case of the fp8 suite
(tests/gpu/test_gpu_fp8_kv.py, imported so that pytest collects them here again) runs under the
override, unsplit and with each tile's blocks split three ways (partials merged through the
workspace), each compared with the CPU backend and the fp64 reference, paged against flat
bitwise, graph replays against eager calls. Calls the override does not reach (decode batches,
the one-consumer shape) run their own kernels as before; per-token scales:
test_gpu_fp8_token_scales.py."""
import pytest
import torch

import flashmsa.testing
from gpu_harness import check_gpu_result, run_gpu
from test_gpu_fp8_kv import *  # noqa: F401,F403  (the fp8 suite's tests, collected again)
from test_gpu_fp8_kv import fp8_case


@pytest.fixture(autouse=True, params=[{}, {"splits": 3}], ids=["unsplit", "splits3"])
def token_warps(request):
    with flashmsa.testing.launch_overrides(token_warps=1, **request.param):
        yield


@pytest.mark.parametrize("heads", [(64, 4), (16, 2), (8, 1), (4, 4)],
                         ids=lambda h: f"hq{h[0]}_hkv{h[1]}")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_override_takes_the_token_warp_path(heads, dtype, token_warps):
    """The same call through the union tile differs in the order of its sums, so in some bits:
    equal outputs would mean the override reached another path. Both are checked."""
    hq, hkv = heads
    case = fp8_case(f"token_warp_path-hq{hq}-hkv{hkv}", [400, 170, 3], [6000, 2500, 900], hq,
                    hkv, 16, True, dtype=dtype)
    warps = run_gpu(case)
    check_gpu_result(case, warps)
    with flashmsa.testing.launch_overrides(token_warps=0):
        union = run_gpu(case)
    check_gpu_result(case, union)
    assert not torch.equal(warps[0], union[0]), (
        f"[{case.name}] token warps and the union tile gave bitwise equal outputs")


def test_token_warps_deterministic(token_warps):
    case = fp8_case("token_warp_repeat", [333, 90], [9000, 1200], 64, 4, 16, True)
    first = run_gpu(case)
    check_gpu_result(case, first)
    for _ in range(3):
        again = run_gpu(case)
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1]), (
            f"[{case.name}] a repeated call changed the output")
