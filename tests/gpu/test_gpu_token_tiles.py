"""The two-consumer prefill kernel's token-tile consumer (src/sm90/token_tile_consumer.cuh),
reached through the test-only launch override token_tiles=1: every case of the contract suite
(tests/gpu/test_gpu_contract.py, imported so that pytest collects them here again) runs under
the override, unsplit and with each tile's blocks split three ways (partials merged through the
workspace), each compared with the CPU backend and the fp64 reference. Calls the override does
not reach (decode batches, the one-consumer shape, fp8 K/V) run their own kernels as before."""
import pytest
import torch

import flashmsa.testing
from gpu_harness import check_gpu_result, make_case, run_gpu
from test_gpu_contract import *  # noqa: F401,F403  (the contract's tests, collected again)


@pytest.fixture(autouse=True, params=[{}, {"splits": 3}], ids=["unsplit", "splits3"])
def token_tiles(request):
    with flashmsa.testing.launch_overrides(token_tiles=1, **request.param):
        yield


@pytest.mark.parametrize("heads", [(64, 4), (16, 2), (8, 1)], ids=lambda h: f"hq{h[0]}_hkv{h[1]}")
def test_override_takes_the_token_tile_path(heads, token_tiles):
    """The same call through the union tile differs in the order of its sums, so in some bits:
    equal outputs would mean the override reached another path. Both are checked."""
    hq, hkv = heads
    case = make_case(f"token_tile_path-hq{hq}-hkv{hkv}", [400, 170], [6000, 2500], hq, hkv, 16,
                     True, seed=31)
    tiles = run_gpu(case)
    check_gpu_result(case, tiles)
    with flashmsa.testing.launch_overrides(token_tiles=0):
        union = run_gpu(case)
    assert not torch.equal(tiles[0], union[0]), (
        f"[{case.name}] token tiles and the union tile gave bitwise equal outputs")


def test_token_tiles_deterministic(token_tiles):
    case = make_case("token_tile_repeat", [333, 90], [9000, 1200], 64, 4, 16, True, seed=32)
    first = run_gpu(case)
    check_gpu_result(case, first)
    for _ in range(3):
        again = run_gpu(case)
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1]), (
            f"[{case.name}] a repeated call changed the output")
