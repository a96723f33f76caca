"""The contract's cases on CUDA tensors, each compared with the CPU backend and the fp64
reference within section 7 (tighter bound included), for bf16 and fp16 q with same-dtype K/V.
The case list of the CPU suite (tests/python/test_cpu_backend.py) is imported, not copied."""
import math

import pytest
import torch

import flashmsa
import test_cpu_backend
from gpu_harness import (DEVICE, DTYPES, assert_bitwise, check_gpu_result, dtype_id,
                         garbage_indices, make_case, run_cpu_backend, run_gpu, synchronize)

# (B, Hq, Hkv, topk, q lens, k lens, causal): the CPU suite's cases (issue 2's list, the
# MiniMax-M3 head layout at small lengths, group size 3, topk 1 and 64), run here on CUDA.
ISSUE_CASES = test_cpu_backend.ISSUE_CASES
# Every pattern in bf16, one in fp16: the cases differ in shape far more than in dtype.
DTYPE_PATTERNS = [(torch.bfloat16, p) for p in ("random", "clustered", "indexer")] + [
    (torch.float16, "random")]

# (Hq, Hkv): group sizes 1, 3, 8, 16, 64 and the tensor-parallel shapes of MiniMax-M3
# (TP 4: Hq 16 / Hkv 1, TP 8: Hq 8 / Hkv 1).
GROUPS = [(4, 4), (12, 4), (16, 2), (32, 2), (64, 1), (16, 1), (8, 1)]


def _name(prefix, dtype, **parts):
    return "-".join([prefix, dtype_id(dtype)] + [f"{k}{v}" for k, v in parts.items()])


@pytest.mark.parametrize("dtype,pattern", DTYPE_PATTERNS,
                         ids=[f"{dtype_id(d)}-{p}" for d, p in DTYPE_PATTERNS])
@pytest.mark.parametrize("spec", ISSUE_CASES, ids=lambda s: "b{}_hq{}_hkv{}_topk{}_{}".format(
    s[0], s[1], s[2], s[3], "causal" if s[6] else "full"))
def test_cpu_suite_cases(spec, dtype, pattern):
    _, hq, hkv, topk, lens_q, lens_k, causal = spec
    name = _name("cpu_suite_case", dtype, hq=hq, hkv=hkv, topk=topk, q=lens_q, k=lens_k,
                 causal=causal, pattern=pattern)
    case = make_case(name, lens_q, lens_k, hq, hkv, topk, causal, dtype=dtype, pattern=pattern,
                     seed=11 + ISSUE_CASES.index(spec))
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("pattern", ["random", "clustered", "indexer"])
def test_minimax_m3_small(pattern, dtype):
    """Hq 64, Hkv 4, topk 16, causal, two ragged requests."""
    name = _name("m3_small", dtype, pattern=pattern)
    case = make_case(name, [300, 77], [2500, 3000], 64, 4, 16, True, dtype=dtype,
                     pattern=pattern, seed=12)
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("heads", GROUPS, ids=lambda h: f"hq{h[0]}_hkv{h[1]}")
def test_group_sizes(heads, causal, dtype):
    hq, hkv = heads
    name = _name("group", dtype, hq=hq, hkv=hkv, causal=causal)
    case = make_case(name, [150, 90], [2100, 1300], hq, hkv, 16, causal, dtype=dtype, seed=13)
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("topk", [1, 2, 16, 33, 64])
def test_topk(topk, dtype):
    """topk 64 needs more than 64 blocks to select from: 8300 keys are 65 blocks."""
    name = _name("topk", dtype, topk=topk)
    case = make_case(name, [120, 40], [8300, 900], 16, 2, topk, True, dtype=dtype, seed=14)
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("topk", [16, 32, 33, 64])
@pytest.mark.parametrize("heads", [(4, 4), (8, 2)], ids=lambda h: f"hq{h[0]}_hkv{h[1]}")
def test_one_consumer_tiles(heads, topk):
    """Requests of 16 rows at group sizes 1 and 4 take the prefill kernel's one-consumer shape
    (two CTAs per SM), whose tiles hold up to 64 tokens: at group size 1 and topk 32 that many
    tokens' planning buffers leave no room for a K/V stage, and the launch plan halves them."""
    hq, hkv = heads
    name = _name("one_consumer", torch.bfloat16, hq=hq, hkv=hkv, topk=topk)
    case = make_case(name, [16, 16, 16], [9000, 2000, 300], hq, hkv, topk, True, seed=16 + topk,
                     layout="paged")
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_scales(dtype):
    """softmax_scale and the global K/V scales (the latter apply to any K/V dtype)."""
    name = _name("scales", dtype)
    scalars = dict(softmax_scale=0.05, k_global_scale=1.7, v_global_scale=0.6)
    case = make_case(name, [90, 130], [1500, 2600], 16, 2, 16, True, dtype=dtype, seed=15,
                     scalars=scalars)
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature_lse(temperature, dtype):
    name = _name("lse_t", dtype, T=temperature)
    case = make_case(name, [100, 60], [2000, 700], 16, 4, 16, True, dtype=dtype, seed=16,
                     scalars=dict(lse_temperature_scale=temperature))
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("q_offset", [0, 700, -50, [1200, 3], [-200, 5000]],
                         ids=["int0", "int700", "int-50", "tensor", "tensor_neg"])
def test_explicit_q_offset(q_offset, dtype):
    """Explicit int and per-request tensor offsets, including positions that read nothing."""
    name = _name("q_offset", dtype, q_offset=q_offset)
    case = make_case(name, [180, 64], [2000, 1500], 16, 2, 16, True, dtype=dtype, seed=17,
                     q_offset=q_offset)
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_rows_that_read_nothing(dtype):
    """Every way a row can read nothing: no key at all (seqlen_k 0), a negative causal position,
    an index list that starts with a negative id, only out-of-range ids. out must be exactly 0
    and lse, lse_t exactly -inf there; the other rows stay right."""
    name = _name("empty_rows", dtype)
    case = make_case(name, [40, 50, 60, 70], [0, 900, 1300, 2000], 8, 2, 8, True, dtype=dtype,
                     q_offset=[0, -30, 0, 1930], seed=18)
    q2k = case.gpu["q2k_indices"].clone()
    third = slice(90, 150)          # request 2
    q2k[:, third.start:third.start + 20, 0] = -1
    q2k[:, third.start + 20:third.start + 40, :] = 11   # 1300 keys are 11 blocks: 11 is past them
    case.with_gpu(q2k_indices=q2k)
    out, lse, lse_t = run_gpu(case)
    check_gpu_result(case, (out, lse, lse_t))
    dead = torch.zeros(out.shape[0], dtype=torch.bool, device=DEVICE)
    dead[:40] = True                                    # seqlen_k 0
    dead[40:70] = True                                  # positions -30 .. -1
    dead[third.start:third.start + 40] = True
    assert bool((out[dead] == 0).all()), f"[{name}] rows that read nothing are not exactly 0"
    for what, x in (("lse", lse), ("lse_t", lse_t)):
        assert bool(torch.isneginf(x[dead]).all()), f"[{name}] {what} is not -inf on empty rows"
        assert bool(torch.isfinite(x[~dead]).all()), f"[{name}] {what} not finite on read rows"


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", ["flat", "paged"])
def test_garbage_indices(layout, dtype):
    """No fault, and the contract's result, whatever the index values. Paged: the page table's
    unused entries hold garbage too, and ids at or past page_table.shape[1] are ignored."""
    name = _name("garbage", dtype, layout=layout)
    case = make_case(name, [150, 97], [1800, 1000], 16, 2, 16, True, dtype=dtype, seed=19,
                     layout=layout)
    q2k = garbage_indices(case.cpu["q2k_indices"], num_blocks_min=8,
                          generator=torch.Generator())
    changes = dict(q2k_indices=q2k.to(DEVICE))
    if layout == "paged":
        table = case.cpu["page_table"].clone()
        table[table < 0] = 2 ** 31 - 1                  # unused entries: never dereferenced
        changes["page_table"] = table.to(DEVICE)
    case.with_gpu(**changes)
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_q2k_token_major_view(dtype):
    """q2k given as a transposed (total_q, Hkv, topk) token-major buffer: any strides."""
    name = _name("q2k_view", dtype)
    case = make_case(name, [130, 70], [2200, 800], 16, 4, 16, True, dtype=dtype, seed=20)
    token_major = case.gpu["q2k_indices"].permute(1, 0, 2).contiguous()
    view = token_major.permute(1, 0, 2)
    assert not view.is_contiguous(), f"[{name}] the q2k view should not be contiguous"
    case.with_gpu(q2k_indices=view)
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_q_slice_of_fused_qkv(dtype):
    """q as the first Hq heads of a fused (total_q, Hq + 2 Hkv, D) QKV projection buffer."""
    name = _name("fused_qkv", dtype)
    case = make_case(name, [111, 60], [1700, 2400], 16, 2, 16, True, dtype=dtype, seed=21)
    q = case.gpu["q"]
    total_q, hq, dim = q.shape
    fused = torch.randn(total_q, hq + 4, dim, device=DEVICE).div_(3).to(dtype)
    fused[:, :hq] = q
    view = fused[:, :hq]
    assert view.stride(0) == (hq + 4) * dim, f"[{name}] q is not a strided slice"
    case.with_gpu(q=view)
    check_gpu_result(case, run_gpu(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_out_buffer_and_allocated_output(dtype):
    """out= (NaN-poisoned, strided: a slice of a wider buffer) is written whole and returned;
    the library-allocated output holds the same values bitwise."""
    name = _name("out", dtype)
    case = make_case(name, [200], [3000], 16, 2, 16, True, dtype=dtype, seed=22)
    allocated, _, _ = run_gpu(case, lse=False, out=None)
    total_q, hq, dim = case.gpu["q"].shape
    wide = torch.full((total_q, hq + 3, dim), math.nan, dtype=dtype, device=DEVICE)
    strided_out = wide[:, 1:hq + 1]
    got, _, _ = run_gpu(case, lse=False, out=strided_out)
    assert bool(torch.isnan(wide[:, 0]).all() and torch.isnan(wide[:, hq + 1:]).all()), (
        f"[{name}] the call wrote outside the out= view")
    assert_bitwise(name, "out= vs allocated output", got, allocated)
    cpu_out, _, _ = run_cpu_backend(case, lse=False)
    check_gpu_result(case, (got, None, None), cpu_result=(cpu_out, None, None))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_lse_only(dtype):
    """return_softmax_lse alone returns (out, lse), both right."""
    name = _name("lse_only", dtype)
    case = make_case(name, [64, 100], [1000, 1900], 8, 2, 16, True, dtype=dtype, seed=23)
    out = torch.full_like(case.gpu["q"], math.nan)
    result = flashmsa.msa_sparse_attention(**case.gpu, return_softmax_lse=True, out=out)
    synchronize(name)
    assert isinstance(result, tuple) and len(result) == 2, f"[{name}] expected (out, lse)"
    assert result[0] is out, f"[{name}] out= was not returned"
    check_gpu_result(case, (result[0], result[1], None))
