"""The package's helpers: flashmsa.patterns (contract section 10), flashmsa.quantize against
the test reference's independent decoders, and flashmsa.reference (the bench's sampled-row
check and useful-work count) against the test reference."""
import math

import pytest
import torch

from flashmsa import quantize, reference
from flashmsa.patterns import make_q2k
from flashmsa.quantize import quantize_fp8, quantize_nvfp4
from msa_inputs import build_case, reference_kwargs
from torch_reference import dequantize_kv, reference_msa, swizzled_scale_offset

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


@pytest.mark.parametrize("paged", [False, True], ids=["flat", "paged"])
def test_package_dequantizer_agrees_with_the_reference(paged):
    x = torch.randn((4, 2, 128, 128) if paged else (500, 2, 128)) / 3
    packed, scales = quantize_nvfp4(x, paged=paged)
    assert torch.equal(quantize.dequantize_kv(packed, scales), dequantize_kv(packed, scales, paged))


@pytest.mark.parametrize("kv_dtype", [None, "fp8", "nvfp4"], ids=["kv=q", "kv=fp8", "kv=nvfp4"])
@pytest.mark.parametrize("layout", ["flat", "paged"])
def test_sampled_row_evaluation_agrees_with_the_reference(layout, kv_dtype):
    kwargs = build_case([70, 40], [1200, 300], 8, 2, 8, True, kv_dtype=kv_dtype, layout=layout,
                        q_offset=[1000, -20], seed=41)
    rows = torch.tensor([0, 5, 69, 70, 75, 109])
    call = reference_kwargs(kwargs)
    got = reference.evaluate_rows(**call, lse_temperature_scale=0.5, rows=rows)
    want = reference_msa(**call, lse_temperature_scale=0.5, query_rows=rows)
    for name, a, b in zip(("out", "lse", "lse_t"), got, want):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12), name
        assert torch.equal(torch.isneginf(a), torch.isneginf(b)), name


def test_keys_read_counts_what_the_reference_reads():
    """keys_read against the reference: with v = 1 everywhere and q = 0, every readable key has
    the same score, so out = 1 for rows that read something and lse = log(count)."""
    kwargs = build_case([90, 50], [1000, 2000], 2, 2, 8, True, seed=42)
    kwargs["q"] = torch.zeros_like(kwargs["q"])
    counts = reference.keys_read(kwargs["q2k_indices"], kwargs["cu_seqlens_q"],
                                 kwargs["cu_seqlens_k"], causal=True)
    _, lse, _ = reference_msa(**reference_kwargs(kwargs))
    expected = torch.exp(lse).round().long().T  # (Hkv, total_q), one query head per KV head
    assert torch.equal(counts, expected)
