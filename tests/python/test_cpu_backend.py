"""The CPU backend against the independent fp64 reference (tests/torch_reference.py), for the
cases of issue 2 and every layout, view and dtype the contract allows."""
import math
import zlib

import pytest
import torch

import flashmsa
from msa_inputs import HEAD_DIM, build_case, reference_kwargs
from torch_reference import check_close, reference_msa

TEMPERATURE = 0.7  # lse_t is always checked at a temperature other than 1


def run_checked(kwargs, case, baseline=False, **options):
    """Run the library with lse and lse_t, check all three against the reference, return them."""
    out, lse, lse_t = flashmsa.msa_sparse_attention(
        **kwargs, return_temperature_lse=True, lse_temperature_scale=TEMPERATURE, **options)
    reference = reference_kwargs(kwargs)
    ref_out, ref_lse, ref_lse_t = reference_msa(**reference, lse_temperature_scale=TEMPERATURE)
    plain = None
    if baseline:
        plain = reference_msa(**reference, lse_temperature_scale=TEMPERATURE,
                              compute_dtype=kwargs["q"].dtype)[0]
    check_close(out, ref_out, kwargs["q"].dtype, lse=lse, ref_lse=ref_lse, lse_t=lse_t,
                ref_lse_t=ref_lse_t, baseline=plain, case=case)
    return out, lse, lse_t


def assert_bitwise_equal(got, want, case):
    for name, a, b in zip(("out", "lse", "lse_t"), got, want):
        assert torch.equal(a, b), f"[{case}] {name} differs from the reference layout's bitwise"


# (B, Hq, Hkv, topk, q lens, k lens, causal), from issue 2, plus the MiniMax-M3 head layout at
# small lengths, a group size that is not a power of two, and topk 1 and 64.
ISSUE_CASES = [
    (1, 1, 1, 4, [70], [1000], False),
    (2, 4, 2, 16, [100, 37], [2048, 700], False),
    (2, 2, 2, 16, [130, 64], [1024, 512], True),
    (1, 8, 2, 8, [200], [4096], False),
    (1, 16, 1, 16, [333], [3000], False),
    (2, 8, 8, 16, [97, 211], [1111, 2222], True),
    (2, 64, 4, 16, [96, 160], [700, 2500], True),  # MiniMax-M3: Hq 64, Hkv 4, topk 16, causal
    (1, 12, 4, 16, [150], [2600], True),  # group size 3
    (2, 4, 2, 1, [50, 80], [600, 900], True),  # topk 1
    (1, 4, 2, 64, [120], [9000], True),  # topk 64
    (1, 4, 1, 64, [40], [3000], False),  # topk 64 above the request's 24 blocks
]


@pytest.mark.parametrize("pattern", ["random", "clustered", "indexer"])
@pytest.mark.parametrize("shape", ISSUE_CASES, ids=lambda s: "B{}-Hq{}-Hkv{}-topk{}-q{}-k{}-{}".format(
    s[0], s[1], s[2], s[3], "_".join(map(str, s[4])), "_".join(map(str, s[5])),
    "causal" if s[6] else "full"))
def test_issue_cases(shape, pattern):
    batch, num_qo_heads, num_kv_heads, topk, seqlens_q, seqlens_k, causal = shape
    assert len(seqlens_q) == batch
    seed = zlib.crc32(repr((shape, pattern)).encode()) % 10_000
    kwargs = build_case(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal,
                        pattern=pattern, seed=seed)
    run_checked(kwargs, f"{shape} {pattern}", baseline=True)


DTYPE_SHAPE = ([90, 40], [1500, 600], 8, 2, 16)


@pytest.mark.parametrize("kv_dtype", [None, "fp8", "nvfp4"], ids=["kv=q", "kv=fp8", "kv=nvfp4"])
@pytest.mark.parametrize("q_dtype", [torch.bfloat16, torch.float16], ids=["q=bf16", "q=fp16"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_kv_dtypes_flat_and_paged(q_dtype, kv_dtype, causal):
    """Every K/V dtype with both q dtypes; the paged call (pages in random order) gives the flat
    call's result bitwise."""
    seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk = DTYPE_SHAPE
    case = f"q {q_dtype} kv {kv_dtype or 'q'} causal {causal}"
    common = dict(q_dtype=q_dtype, kv_dtype=kv_dtype, seed=11)
    flat = build_case(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal, **common)
    paged = build_case(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal,
                       layout="paged", **common)
    flat_result = run_checked(flat, case + " flat")
    paged_result = run_checked(paged, case + " paged")
    assert_bitwise_equal(paged_result, flat_result, case + ": paged vs flat")


@pytest.mark.parametrize("view", ["packed", "nhd"])
@pytest.mark.parametrize("layout", ["flat", "paged"])
@pytest.mark.parametrize("kv_dtype", [None, "fp8", "nvfp4"], ids=["kv=q", "kv=fp8", "kv=nvfp4"])
def test_kv_views_read_in_place(kv_dtype, layout, view):
    """The K and V halves of one packed cache, and NHD caches permuted to HND, give the
    contiguous result bitwise."""
    shape = ([70, 33], [900, 1300], 8, 2, 8)
    contiguous = build_case(*shape, True, kv_dtype=kv_dtype, layout=layout, seed=5)
    strided = build_case(*shape, True, kv_dtype=kv_dtype, layout=layout, view=view, seed=5)
    assert not strided["k"].is_contiguous()
    case = f"kv {kv_dtype or 'q'} {layout} {view}"
    assert_bitwise_equal(run_checked(strided, case), run_checked(contiguous, case), case)


@pytest.mark.parametrize("q_offset", [0, 37, -60, 5000, [300, -5], [0, 1000]],
                         ids=lambda o: f"q_offset={o}")
def test_explicit_q_offset(q_offset):
    kwargs = build_case([100, 60], [1000, 700], 4, 2, 16, True, q_offset=q_offset, seed=3)
    out, lse, _ = run_checked(kwargs, f"q_offset {q_offset}")
    if q_offset == -60:
        # Positions -60..-1 read nothing: zero output, -inf lse.
        assert torch.equal(out[:60], torch.zeros_like(out[:60]))
        assert bool(torch.isneginf(lse[:60]).all())


def test_q_offset_is_ignored_without_causal():
    kwargs = build_case([100, 60], [1000, 700], 4, 2, 16, False, seed=3)
    with_offset = dict(kwargs, q_offset=torch.tensor([-100, 3], dtype=torch.int32))
    assert_bitwise_equal(run_checked(with_offset, "non-causal q_offset"),
                         run_checked(kwargs, "non-causal"), "q_offset without causal")


def test_rows_that_read_nothing():
    """All -1 rows, lists cut by a leading -1, only out-of-range ids, a request without keys,
    a request without queries: out 0 exactly, lse -inf exactly, never NaN."""
    seqlens_q, seqlens_k = [40, 30, 0, 25], [500, 0, 300, 400]
    kwargs = build_case(seqlens_q, seqlens_k, 4, 2, 8, False, seed=9)
    q2k = kwargs["q2k_indices"].clone()
    q2k[:, 0:5] = -1
    q2k[:, 5:10, 0] = -1  # the rest of these lists is ignored
    q2k[:, 10:15] = 4  # request 0 has blocks 0..3 only
    q2k[1, 15:20] = 2 ** 31 - 1
    kwargs["q2k_indices"] = q2k
    out, lse, lse_t = run_checked(kwargs, "rows that read nothing")
    empty = torch.zeros(q2k.shape[1], 4, dtype=torch.bool)
    empty[0:15] = True
    empty[15:20, 2:] = True  # query heads 2, 3 belong to KV head 1
    empty[40:70] = True  # request 1 has no keys
    assert torch.equal(out[empty], torch.zeros_like(out[empty]))
    assert bool(torch.isneginf(lse[empty]).all()) and bool(torch.isneginf(lse_t[empty]).all())
    assert bool(torch.isfinite(lse[~empty]).all())


def test_paged_request_without_keys():
    kwargs = build_case([20, 30], [0, 300], 4, 2, 4, True, layout="paged", seed=4)
    out, lse, _ = run_checked(kwargs, "paged, seqused_k 0")
    assert torch.equal(out[:20], torch.zeros_like(out[:20]))
    assert bool(torch.isneginf(lse[:20]).all())


def test_duplicated_unsorted_out_of_range_ids():
    kwargs = build_case([64, 50], [2000, 900], 8, 2, 16, True, seed=21)
    clean = kwargs["q2k_indices"]
    messy = clean.flip(-1).clone()  # unsorted: reversed, -1 padding now comes first on short rows
    messy = torch.where(messy < 0, 10_000, messy)  # so padding becomes out-of-range ids
    messy[:, :, 1] = messy[:, :, 0]  # duplicates
    messy[:, ::3, 2] = 2 ** 31 - 1  # far out of range
    messy[:, 1::3, 3] = 16  # request 0 has blocks 0..15: just out of range
    kwargs["q2k_indices"] = messy
    run_checked(kwargs, "duplicated, unsorted, out-of-range ids")


def test_entries_after_the_first_negative_are_ignored():
    kwargs = build_case([50], [1500], 4, 2, 8, False, seed=22)
    cut = kwargs["q2k_indices"].clone()
    cut[:, :, 4] = -7
    truncated = dict(kwargs, q2k_indices=cut)
    padded = dict(kwargs, q2k_indices=torch.cat(
        [cut[:, :, :4], torch.full_like(cut[:, :, 4:], -1)], dim=-1))
    assert_bitwise_equal(run_checked(truncated, "cut at -7"), run_checked(padded, "-1 padded"),
                         "ids after a negative entry")


@pytest.mark.parametrize("layout", ["token_major", "strided_topk"])
def test_non_contiguous_q2k(layout):
    kwargs = build_case([80, 45], [1200, 800], 4, 2, 8, True, seed=8)
    q2k = kwargs["q2k_indices"]
    if layout == "token_major":
        view = q2k.transpose(0, 1).contiguous().transpose(0, 1)  # (total_q, Hkv, topk) buffer
    else:
        buffer = torch.full((q2k.shape[0], q2k.shape[1], 2 * q2k.shape[2]), 99, dtype=torch.int32)
        buffer[:, :, ::2] = q2k
        view = buffer[:, :, ::2]
    assert not view.is_contiguous()
    strided = dict(kwargs, q2k_indices=view)
    assert_bitwise_equal(run_checked(strided, f"q2k {layout}"), run_checked(kwargs, "q2k"),
                         f"q2k {layout}")


def test_q_as_a_slice_of_a_fused_qkv_buffer():
    kwargs = build_case([60], [1000], 8, 2, 8, True, seed=12)
    q = kwargs["q"]
    fused = torch.zeros(q.shape[0], q.shape[1] + 4, HEAD_DIM, dtype=q.dtype)
    fused[:, :q.shape[1]] = q
    sliced = dict(kwargs, q=fused[:, :q.shape[1]])
    assert not sliced["q"].is_contiguous()
    assert_bitwise_equal(run_checked(sliced, "fused qkv"), run_checked(kwargs, "q"), "q view")


def test_out_is_written_in_place():
    kwargs = build_case([70, 30], [800, 1500], 8, 2, 8, True, seed=13)
    expected = flashmsa.msa_sparse_attention(**kwargs)
    out = torch.full_like(expected, math.nan)
    returned = flashmsa.msa_sparse_attention(**kwargs, out=out)
    assert returned is out
    assert torch.equal(out, expected)
    # A strided out (half of a wider buffer) is written through its strides, nothing else.
    buffer = torch.full((*expected.shape[:2], 2 * HEAD_DIM), math.nan, dtype=expected.dtype)
    returned, lse = flashmsa.msa_sparse_attention(**kwargs, return_softmax_lse=True,
                                                  out=buffer[..., :HEAD_DIM])
    assert torch.equal(buffer[..., :HEAD_DIM], expected)
    assert bool(torch.isnan(buffer[..., HEAD_DIM:]).all())
    run_checked(dict(kwargs), "out=", out=torch.full_like(expected, math.nan))


def test_return_conventions():
    kwargs = build_case([30], [600], 4, 2, 4, True, seed=14)
    out = flashmsa.msa_sparse_attention(**kwargs)
    assert isinstance(out, torch.Tensor) and out.shape == (30, 4, HEAD_DIM)
    assert out.dtype == torch.bfloat16
    pair = flashmsa.msa_sparse_attention(**kwargs, return_softmax_lse=True)
    assert len(pair) == 2 and pair[1].shape == (30, 4) and pair[1].dtype == torch.float32
    for softmax_lse in (False, True):
        triple = flashmsa.msa_sparse_attention(**kwargs, return_softmax_lse=softmax_lse,
                                               return_temperature_lse=True)
        assert len(triple) == 3 and triple[2].dtype == torch.float32
        assert torch.equal(triple[0], out) and torch.equal(triple[1], pair[1])
    # T = 1: lse_t is lse.
    _, lse, lse_t = flashmsa.msa_sparse_attention(**kwargs, return_temperature_lse=True)
    assert torch.equal(lse, lse_t)


def test_softmax_and_global_scales():
    kwargs = build_case([50, 20], [1000, 300], 8, 4, 8, True, seed=15)
    scaled = dict(kwargs, softmax_scale=0.05, k_global_scale=1.7, v_global_scale=0.5)
    result = run_checked(scaled, "softmax_scale 0.05, global scales 1.7 / 0.5")
    # Scales may also come as one-element CPU tensors.
    as_tensors = dict(scaled, k_global_scale=torch.tensor(1.7), v_global_scale=torch.tensor([0.5]))
    assert_bitwise_equal(run_checked(as_tensors, "scales as tensors"), result, "tensor scales")


def test_identical_inputs_give_identical_outputs():
    kwargs = build_case([100], [3000], 16, 4, 16, True, pattern="clustered", seed=16)
    first = flashmsa.msa_sparse_attention(**kwargs, return_temperature_lse=True)
    second = flashmsa.msa_sparse_attention(**kwargs, return_temperature_lse=True)
    assert_bitwise_equal(second, first, "two runs")


def test_bad_page_table_entries_read_nothing_instead_of_crashing():
    """No index value may cause an out-of-bounds read (section 4). A table entry that is not a
    page makes that block read nothing (the library's choice where the contract is silent)."""
    kwargs = build_case([40, 30], [600, 500], 4, 2, 8, False, layout="paged", seed=17)
    table = kwargs["page_table"].clone()
    table[0, 0] = 1_000_000
    table[0, 1] = -5
    table[1, 2] = 2 ** 31 - 1
    run_checked(dict(kwargs, page_table=table), "garbage page ids")


def test_garbage_sequence_lengths_do_not_crash():
    """Lengths the host never checks (they live in device memory) must stay in bounds."""
    kwargs = build_case([40, 30], [600, 500], 4, 2, 8, True, seed=18)
    for cu_seqlens_k in ([0, 600, 100_000], [0, -50, 1100], [500, 10, 0]):
        call = dict(kwargs, cu_seqlens_k=torch.tensor(cu_seqlens_k, dtype=torch.int32))
        out = flashmsa.msa_sparse_attention(**call)
        assert bool(torch.isfinite(out.float()).all()), f"cu_seqlens_k {cu_seqlens_k}"
    paged = build_case([40, 30], [600, 500], 4, 2, 8, True, layout="paged", seed=18)
    for seqused in ([100_000, -3], [-1, 2 ** 31 - 1]):
        call = dict(paged, seqused_k=torch.tensor(seqused, dtype=torch.int32))
        out = flashmsa.msa_sparse_attention(**call)
        assert bool(torch.isfinite(out.float()).all()), f"seqused_k {seqused}"
    call = dict(kwargs, cu_seqlens_q=torch.tensor([0, 10_000, -7], dtype=torch.int32))
    assert bool(torch.isfinite(flashmsa.msa_sparse_attention(**call).float()).all())


def test_empty_call():
    kwargs = build_case([0], [300], 4, 2, 4, True, seed=19)
    out, lse = flashmsa.msa_sparse_attention(**kwargs, return_softmax_lse=True)
    assert out.shape == (0, 4, HEAD_DIM) and lse.shape == (0, 4)
