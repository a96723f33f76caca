"""Lengths, offsets, positions and block ids near the int32 limits (issue 31, part 2) on the GPU:
the cases of tests/python/test_int32_limits.py (imported, not copied: its docstring lists them),
each run on CUDA tensors with a NaN-poisoned out= and compared element by element with the CPU
backend (the same call on the CPU copies) and with an independent fp64 evaluation:
- torch_reference (gpu_harness.check_gpu_result, tighter bound included) where the page table is
  small enough for its dense evaluation;
- test_int32_limits.sparse_reference, which touches only the selected blocks, for the page tables
  of 2^24 columns that give a request a key length of 2^31 - 1 on the device, and of 45056 /
  45057 columns (the two-consumer warp plan's bitmap at its largest, and its sorting network).
Where V is one-hot (V[page, head, t, :] = e_t, one valid block a row), which keys a row reads is
also checked exactly: out[row, head, t] != 0 iff the contract reads token t of the row's block.

Kernels taken (src/sm90/launch_plan.cpp): decode-* the one-token decode kernel
(decode-g32: the one-consumer kernel, warp plan in entry order); mtp the one-token kernel;
mtp-b8 and prefill-g16 the two-consumer kernel with warp planning (bitmap for tables of at most
45056 columns, sorting network beyond); prefill-g8 the two-consumer kernel's block-wide plan.
"""
import pytest
import torch

import test_int32_limits as limits
from gpu_harness import (DTYPES, Case, check_gpu_result, check_inputs_unchanged,
                         dtype_id, run_cpu_backend, run_gpu)
from torch_reference import check_close


def _gpu_case(name, build):
    return Case(name, build())


def check_sparse_gpu_result(case, got, probe=False):
    """check_gpu_result's comparisons for a case too large for torch_reference: every element of
    out finite (out= was NaN-poisoned), close to the sparse fp64 evaluation (lse, lse_t too),
    exact zeros / -inf on rows that read nothing, the one-hot probe when asked, close to the CPU
    backend, and no input written."""
    out, lse, lse_t = got
    name, dtype = case.name, case.q_dtype
    finite = torch.isfinite(out.float())
    assert bool(finite.all()), (f"[{name}] out has {int((~finite).sum())} NaN/inf elements "
                                f"(unwritten or poisoned) of {out.numel()}")
    want = limits.sparse_reference(case.cpu)
    limits.check_against(got, want, dtype, f"{name} vs sparse fp64 evaluation")
    limits.check_empty_rows(got, want[1], name)
    if probe:
        limits.check_probe(out, want[3], name)
    cpu_out, cpu_lse, cpu_lse_t = run_cpu_backend(case)
    check_close(out.cpu(), cpu_out, dtype, lse=lse.cpu(), ref_lse=cpu_lse, lse_t=lse_t.cpu(),
                ref_lse_t=cpu_lse_t, case=f"{name} vs CPU backend")
    check_inputs_unchanged(case)


def check_small_case(case, got, probe=False):
    """check_gpu_result (torch_reference, tighter bound, CPU backend, unchanged inputs), plus the
    sparse evaluation and, with a one-hot V, the exact probe."""
    check_gpu_result(case, got)
    want = limits.sparse_reference(case.cpu)
    limits.check_against(got, want, case.q_dtype, f"{case.name} vs sparse fp64 evaluation")
    if probe:
        limits.check_probe(got[0], want[3], case.name)


# 1. int q_offset near and past the int32 limits (flat) -------------------------------------

# bf16 for every case, fp16 for the one-token kernel's at the extremes.
SCALAR_DTYPE_CASES = ([(spec, torch.bfloat16) for spec in limits.SCALAR_CASES] +
                      [((s, o, c), torch.float16) for s, o, c in limits.SCALAR_CASES
                       if s == "mtp" and o in limits.SCALAR_OFFSETS_NON_CAUSAL])


@pytest.mark.parametrize("spec,dtype", SCALAR_DTYPE_CASES,
                         ids=[f"{s}-{o}-{'causal' if c else 'full'}-{dtype_id(d)}"
                              for (s, o, c), d in SCALAR_DTYPE_CASES])
def test_scalar_q_offset_near_int_limits(spec, dtype):
    shape, q_offset, causal = spec
    case = _gpu_case(*limits.scalar_offset_case(shape, q_offset, causal, dtype))
    got = run_gpu(case)
    check_small_case(case, got)
    if causal and q_offset < 0:
        assert bool((got[0] == 0).all()), f"[{case.name}] negative positions must read nothing"
        assert bool(torch.isneginf(got[1]).all()), f"[{case.name}] lse must be -inf everywhere"


@pytest.mark.parametrize("q_offset", [2 ** 62 - 1, -(2 ** 62)])
def test_int64_q_offset_matches_non_causal_or_nothing(q_offset):
    """The largest int offsets the API takes: every key before the position (the non-causal
    result, to the bit on the CPU backend, within the bounds here) or none."""
    name, build = limits.scalar_offset_case("prefill-g8", q_offset, True)
    case = Case(name, build())
    got = run_gpu(case)
    check_small_case(case, got)
    if q_offset > 0:
        full = run_gpu(case, causal=False, q_offset=None)
        check_close(got[0].cpu(), full[0].cpu().double(), case.q_dtype, lse=got[1].cpu(),
                    ref_lse=full[1].cpu(), case=f"{name} vs the non-causal call")


# 2. q_offset as an int32 tensor of extreme values ------------------------------------------

TENSOR_DTYPE_CASES = ([(spec, torch.bfloat16) for spec in limits.TENSOR_CASES] +
                      [(spec, torch.float16) for spec in limits.TENSOR_CASES
                       if spec[1] == "decode" and spec[2]])


@pytest.mark.parametrize("spec,dtype", TENSOR_DTYPE_CASES,
                         ids=[f"{l}-{s}-{'causal' if c else 'full'}-{dtype_id(d)}"
                              for (l, s, c), d in TENSOR_DTYPE_CASES])
def test_q_offset_tensor_extremes(spec, dtype):
    case = _gpu_case(*limits.tensor_offset_case(*spec, dtype=dtype))
    check_small_case(case, run_gpu(case))


# 3. seqused_k near INT32_MAX over narrow tables; tables wider than needed -------------------

@pytest.mark.parametrize("spec", limits.SMALL_TABLE_CASES,
                         ids=lambda s: f"{s[0]}-width{s[1]}-{s[2]}")
def test_seqused_near_int32_max_small_tables(spec):
    case = _gpu_case(*limits.small_table_case(*spec))
    got = run_gpu(case)
    if spec[1] <= limits.DENSE_MAX_WIDTH:
        check_small_case(case, got)
    else:
        check_sparse_gpu_result(case, got)


@pytest.mark.parametrize("spec", limits.WIDE_TABLE_CASES, ids=lambda s: f"{s[0]}-{s[1]}")
def test_tables_wider_than_needed(spec):
    case = _gpu_case(*limits.wide_table_case(*spec))
    check_small_case(case, run_gpu(case))


# 4. q2k ids near INT32_MAX and INT32_MIN -----------------------------------------------------

EXTREME_ID_DTYPE_CASES = ([(spec, torch.bfloat16) for spec in limits.EXTREME_ID_CASES] +
                          [(spec, dtype) for spec in limits.EXTREME_ID_CASES
                           for dtype in DTYPES[1:] if spec[1] in ("decode-g16", "prefill-g16")])


@pytest.mark.parametrize("spec,dtype", EXTREME_ID_DTYPE_CASES,
                         ids=[f"{s[0]}-{s[1]}-{dtype_id(d)}" for s, d in EXTREME_ID_DTYPE_CASES])
def test_q2k_ids_near_int32_limits(spec, dtype):
    case = _gpu_case(*limits.extreme_ids_case(*spec, dtype=dtype))
    check_small_case(case, run_gpu(case))


# 6. the default q_offset with seqused_k near INT32_MAX (one-hot V) ------------------------

@pytest.mark.parametrize("spec", limits.DEFAULT_OFFSET_CASES,
                         ids=lambda s: f"rows{s[0]}-width{s[1]}")
def test_default_q_offset_with_seqused_near_int32_max(spec):
    rows, width = spec
    case = _gpu_case(*limits.default_offset_case(rows, width))
    got = run_gpu(case)
    if width <= limits.DENSE_MAX_WIDTH:
        check_small_case(case, got, probe=True)
    else:
        check_sparse_gpu_result(case, got, probe=True)


# 5 and 7. near-limit probes: 2^24-column tables, key lengths 2^31 - 1 .. 2^31 - 129 --------

PROBE_DTYPE_CASES = ([(spec, torch.bfloat16) for spec in limits.PROBE_CASES] +
                     [(spec, torch.float16) for spec in limits.PROBE_CASES
                      if spec[0] in ("decode-g16", "mtp-b8", "prefill-g16")
                      and spec[3] in ("none", "tensor")])


@pytest.mark.parametrize("spec,dtype", PROBE_DTYPE_CASES,
                         ids=[f"{s[0]}-{s[3]}-{dtype_id(d)}" for s, d in PROBE_DTYPE_CASES])
def test_near_int32_limit_probe(spec, dtype):
    case = _gpu_case(*limits.probe_case(*spec, dtype=dtype))
    check_sparse_gpu_result(case, run_gpu(case), probe=True)


# 8. negative, non-monotonic and past-the-end lengths ---------------------------------------

@pytest.mark.parametrize("spec", limits.NEGATIVE_LENGTH_CASES,
                         ids=lambda s: f"{s[0]}-{'causal' if s[1] else 'full'}")
def test_negative_and_non_monotonic_lengths(spec):
    case = _gpu_case(*limits.negative_lengths_case(*spec))
    got = run_gpu(case)
    check_small_case(case, got)
    dead = slice(0, 7) if spec[0] == "paged" else slice(3, 7)
    assert bool((got[0][dead] == 0).all()), f"[{case.name}] a negative length must read nothing"
    assert bool(torch.isneginf(got[1][dead]).all()), f"[{case.name}] lse must be -inf there"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal-int-offset"])
def test_garbage_key_prefix_sums_past_total_k(causal):
    """cu_seqlens_k entries near INT32_MAX, past k's rows: no fault, and the CPU backend's result
    (both clamp the range into k's rows). The causal call takes an explicit offset, so that the
    result does not depend on how the default position treats such lengths."""
    name = f"flat-cu_seqlens_k_past_total_k-{'causal' if causal else 'full'}"
    kwargs = limits.flat_inputs(name, [4, 3, 2], [500, 500, 0], 16, 2, 8, causal,
                                cu_seqlens_k=[0, 500, limits.INT32_MAX, limits.INT32_MAX],
                                q_offset=600 if causal else None)
    case = Case(name, kwargs)
    out, lse, lse_t = run_gpu(case)
    assert bool(torch.isfinite(out.float()).all()), f"[{name}] out has NaN/inf elements"
    cpu_out, cpu_lse, cpu_lse_t = run_cpu_backend(case)
    check_close(out.cpu(), cpu_out, case.q_dtype, lse=lse.cpu(), ref_lse=cpu_lse,
                lse_t=lse_t.cpu(), ref_lse_t=cpu_lse_t, case=f"{name} vs CPU backend")
    check_inputs_unchanged(case)
