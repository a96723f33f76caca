"""flashmsa.patterns (contract section 10) and flashmsa.quantize against the reference's
independent decoders."""
import math

import pytest
import torch

from flashmsa.patterns import make_q2k
from flashmsa.quantize import quantize_fp8, quantize_nvfp4
from torch_reference import dequantize_kv, swizzled_scale_offset

SEQLENS_Q = [100, 37, 300, 0]
SEQLENS_K = [2048, 700, 300, 128]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("pattern", ["random", "clustered", "indexer"])
def test_pattern_rows_follow_the_rules(pattern, causal):
    """Own block first, distinct visible ids, all visible blocks when there are at most topk,
    -1 padding after."""
    topk, num_kv_heads = 16, 2
    q2k = make_q2k(pattern, SEQLENS_Q, SEQLENS_K, num_kv_heads, topk, causal=causal, seed=1)
    assert q2k.shape == (num_kv_heads, sum(SEQLENS_Q), topk) and q2k.dtype == torch.int32
    row = 0
    for seqlen_q, seqlen_k in zip(SEQLENS_Q, SEQLENS_K):
        total_blocks = math.ceil(seqlen_k / 128)
        for local in range(seqlen_q):
            position = seqlen_k - seqlen_q + local
            visible = min(total_blocks, position // 128 + 1) if causal else total_blocks
            for head in range(num_kv_heads):
                ids = q2k[head, row].tolist()
                chosen = [block for block in ids if block >= 0]
                assert ids[0] == min(position // 128, visible - 1), (pattern, row, ids)
                assert len(set(chosen)) == len(chosen) == min(topk, visible), (row, ids)
                assert all(block < visible for block in chosen), (row, ids)
                assert ids[len(chosen):] == [-1] * (topk - len(chosen)), (row, ids)
            row += 1


def test_pattern_is_reproducible_and_heads_differ():
    first = make_q2k("random", [256], [4096], 2, 8, seed=5)
    assert torch.equal(first, make_q2k("random", [256], [4096], 2, 8, seed=5))
    assert not torch.equal(first[0], first[1])


def test_explicit_q_offsets_and_topk_one():
    q2k = make_q2k("clustered", [10, 10], [1000, 1000], 1, 1, q_offsets=[-5, 500])
    assert q2k[0, :5, 0].tolist() == [-1] * 5  # negative positions see nothing
    assert q2k[0, 5:10, 0].tolist() == [0] * 5
    assert q2k[0, 10:, 0].tolist() == [(500 + i) // 128 for i in range(10)]


def test_overlap_orders_the_patterns():
    """Distinct blocks per 8-token tile: clustered < indexer < random (section 10)."""
    distinct = {}
    for pattern in ("random", "clustered", "indexer"):
        q2k = make_q2k(pattern, [8192], [8192], 1, 16, seed=0)[0, 4096:].reshape(-1, 8 * 16)
        distinct[pattern] = sum(len(set(tile.tolist())) for tile in q2k) / q2k.shape[0]
    assert distinct["clustered"] < distinct["indexer"] < distinct["random"], distinct


def test_swizzled_scale_offset_examples():
    """Contract section 6 formula, worked by hand for a few (row, col)."""
    cases = {(0, 0): 0, (0, 5): 512 + 1, (1, 0): 16, (32, 0): 4, (127, 7): 512 + 31 * 16 + 12 + 3,
             (128, 0): 1024, (130, 6): 1024 + 512 + 2 * 16 + 2}
    for (row, col), offset in cases.items():
        assert int(swizzled_scale_offset(torch.tensor(row), torch.tensor(col))) == offset


@pytest.mark.parametrize("paged", [False, True], ids=["flat", "paged"])
def test_nvfp4_round_trip(paged):
    generator = torch.Generator().manual_seed(0)
    shape = (3, 2, 128, 128) if paged else (300, 2, 128)
    x = torch.randn(*shape, generator=generator) / 3
    packed, scales = quantize_nvfp4(x, paged=paged)
    assert packed.dtype == torch.uint8 and packed.shape == (*shape[:-1], 64)
    rows = x[..., 0].numel()
    assert scales.numel() == math.ceil(rows / 128) * 128 * 8
    decoded = dequantize_kv(packed, scales, paged=paged)
    # E2M1 keeps 1 mantissa bit: within a quarter of the group's max after scaling.
    group_max = x.reshape(*shape[:-1], 8, 16).abs().amax(-1).repeat_interleave(16, -1)
    assert bool(((decoded - x).abs() <= group_max / 4 + 1e-6).all())


def test_fp8_round_trip():
    x = torch.randn(500, 2, 128) / 3
    stored, scale = quantize_fp8(x)
    assert stored.dtype == torch.float8_e4m3fn
    decoded = dequantize_kv(stored) * scale
    assert bool(((decoded - x).abs() <= x.abs() / 16 + scale / 8).all())
