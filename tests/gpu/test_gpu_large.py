"""MiniMax-M3 prefill shapes (Hq 64, Hkv 4, D 128, topk 16, causal, one request) at S = 4096 and
32768 for each selection pattern, and calls of more than 65,535 query rows.

S = 4096 is compared whole with the CPU backend and the fp64 reference. At S = 32768 the CPU
backend would take minutes, so every row is compared with an fp32 evaluation on the GPU, and a
random sample of 256 rows with the fp64 reference (tighter bound included) and with the CPU
backend (the sampled rows posed as one-query requests over a paged view of the same cache).
"""
import pytest
import torch

import flashmsa
from gpu_harness import (check_gpu_result, make_case, reference, rows_as_requests, run_gpu,
                         sample_rows, synchronize, to_device)
from torch_reference import check_close

PATTERNS = ["random", "clustered", "indexer"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_m3_s4096(pattern, dtype):
    name = f"m3-S4096-{pattern}-{str(dtype)[6:]}"
    case = make_case(name, [4096], [4096], 64, 4, 16, True, dtype=dtype, pattern=pattern,
                     seed=41)
    check_gpu_result(case, run_gpu(case))


# bf16 for every pattern, fp16 once: each case moves and evaluates 0.5 GiB of q.
S32768 = [(p, torch.bfloat16) for p in PATTERNS] + [("indexer", torch.float16)]


@pytest.mark.parametrize("pattern,dtype", S32768,
                         ids=[f"{p}-{str(d)[6:]}" for p, d in S32768])
def test_m3_s32768(pattern, dtype):
    name = f"m3-S32768-{pattern}-{str(dtype)[6:]}"
    case = make_case(name, [32768], [32768], 64, 4, 16, True, dtype=dtype, pattern=pattern,
                     seed=42)
    got = run_gpu(case)
    rows = sample_rows(32768, 256, seed=42)
    sub_kwargs = rows_as_requests(case, rows)
    cpu = flashmsa.msa_sparse_attention(**sub_kwargs, return_temperature_lse=True)
    # Sample: fp64 reference with the tighter bound, CPU backend, exact zeros; all elements
    # finite. cpu_result holds only the sampled rows, so the CPU comparison is done here.
    check_gpu_result(case, got, rows=rows, cpu_backend=False)
    sampled = tuple(x[rows].cpu() for x in got)
    check_close(sampled[0], cpu[0], dtype, lse=sampled[1], ref_lse=cpu[1], lse_t=sampled[2],
                ref_lse_t=cpu[2], case=f"{name} vs CPU backend (256 sampled rows)")
    # Every row against an fp32 evaluation on the GPU.
    full, full_lse, _ = reference(case, compute_dtype=torch.float32)
    check_close(got[0], full, dtype, lse=got[1], ref_lse=full_lse,
                case=f"{name} vs fp32 evaluation (all rows)")


def test_more_than_65535_rows_one_request():
    name = "rows70001-one-request"
    case = make_case(name, [70001], [70001], 2, 1, 4, True, seed=43)
    check_gpu_result(case, run_gpu(case))


def test_more_than_65535_requests():
    """66,000 requests of one query token each (a grid dimension per request would overflow).
    Whole output against the CPU backend; a sample of rows against the fp64 reference, which
    evaluates request by request."""
    name = "requests66000-decode"
    lens_k = (torch.arange(66000) % 9 + 1).tolist()      # 1..9 keys each
    case = make_case(name, [1] * 66000, lens_k, 2, 1, 2, True, seed=44)
    check_gpu_result(case, run_gpu(case), rows=sample_rows(66000, 512, seed=44))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_m3_sampled_rows_as_paged_requests(pattern):
    """Rows of a long call posed as one-query paged requests over a view of the same cache, with
    per-request q_offset (the form the S = 32768 test evaluates on the CPU): the kernel gives
    the long call's values within section 7 (different calls, so not necessarily bitwise)."""
    name = f"m3-S4096-rows-as-requests-{pattern}"
    case = make_case(name, [4096], [4096], 64, 4, 16, True, pattern=pattern, seed=45)
    got = run_gpu(case)
    rows = sample_rows(4096, 64, seed=45)
    sub = to_device(rows_as_requests(case, rows))
    out, lse, lse_t = flashmsa.msa_sparse_attention(**sub, return_temperature_lse=True)
    synchronize(name)
    check_close(out, got[0][rows], case.q_dtype, lse=lse, ref_lse=got[1][rows], lse_t=lse_t,
                ref_lse_t=got[2][rows], case=name)
