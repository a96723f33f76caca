"""NVFP4 K/V on the Hopper kernels (contract section 6): k and v are packed uint8 (last dim
D // 2, two E2M1 codes a byte, the low nibble the even element), k_scale / v_scale their E4M3
block scales (one per 16 elements of a row), either the swizzled 128x4 table (1-D or 2-D, uint8
or float8_e4m3fn) or, with paged K/V, the page-local 4-D views of msa_inputs'
NVFP4_PAGE_LOCAL_VIEWS; q is bf16 or fp16, k_global_scale / v_global_scale multiply on top.

NVFP4 runs through the one-token decode kernel for decode batches (one token a request, group
size <= 16, topk <= 32) and through the two-consumer prefill kernel otherwise: its union tile,
whose stages the producer's converter warps rewrite in place (the default), or its token warps
(the override token_warps=1, test_prefill_paths below); test_gpu_fp8_kv.py is the model (its cases and sizes, its helpers imported). Each
result is compared with the CPU backend and the fp64 reference within section 7
(gpu_harness.check_gpu_result, on NaN-poisoned outputs). A page-local case must also equal,
bitwise, the call on the same pages with its scales moved to the swizzled table (section 6: a
paged call gives the flat call's bits, whatever the form of its scales):
- prefill: ragged requests (one without query rows), MiniMax-M3 heads (Hq 64 / Hkv 4) and
  Hq 16 / Hkv 1, group sizes 1 to 128, topk 1 to 64, causal or not, q_offset None / int /
  tensor, rows that read nothing, garbage indices (page tables with garbage too), a forced
  split count (splits=3); flat and paged K/V (swizzled scales), the packed K|V halves and NHD
  caches, and paged K/V with page-local scales in every NVFP4_PAGE_LOCAL_VIEWS view, all bitwise
  equal to the flat contiguous result; every swizzled scale form (1-D, 2-D, float8 dtype, an
  oversized table) bitwise equal;
- global scales: none (1.0), powers of two, others, with softmax_scale, lse and temperature lse;
  as one-element float32 tensors on q's device, powers of two bitwise equal to the float form,
  read at graph replay (values written after capture give the eager result at those values);
- every one of the 16 E2M1 codes times every finite E4M3 scale byte (zeros, subnormals,
  negatives, +-448) decoded exactly, in K and in V, in both nibbles, through the decode kernel
  and the prefill kernel (checked by name), with flat, paged and page-local scales;
- decode: batch 1, 16, 64 of one token and multi-token prediction (8 tokens at batch 4 and 32)
  over KV lengths up to 32768, topk 16 and 32, with lse; the decode kernel's limits (group 16,
  topk 32) and the calls just past them (group 17, topk 33, two tokens), checked by kernel name;
  flat decode with offsets, page rows past 1024 pages, garbage indices;
- graph replay equals eager bitwise (new inputs copied into the captured buffers included), two
  eager calls bitwise equal.
"""
import math

import pytest
import torch

import flashmsa
import msa_inputs
import test_cpu_backend
from flashmsa.quantize import swizzled_scale_offsets
from gpu_harness import (DEVICE, Case, capture_graph, check_gpu_result,
                         check_inputs_unchanged, dtype_id, garbage_indices, replay,
                         replay_on_new_inputs, run_gpu, synchronize)
from msa_inputs import NVFP4_PAGE_LOCAL_VIEWS, build_case
from test_gpu_fp8_kv import (BF16, FP16, GROUP_CASES, LONGEST, M3, MIXED_K, MIXED_Q,
                             ONE_TOKEN_GROUPS, ONE_TOKEN_LENGTHS, TOPK_CASES, TP4, _device_scale,
                             assert_same, decode_lengths)

pytestmark = pytest.mark.kv_quant_gpu

NVFP4 = torch.uint8
E4M3 = torch.float8_e4m3fn
HEAD_DIM = msa_inputs.HEAD_DIM
BLOCK_SIZE = msa_inputs.BLOCK_SIZE
SCALES_PER_ROW = HEAD_DIM // 16
GLOBAL_SCALES = ("k_global_scale", "v_global_scale")
# (k_global_scale, v_global_scale): the CPU page-local suite's, powers of two, two others, and
# none given (the contract's 1.0).
SCALES = {"cpu": (0.75, 1.25), "pow2": (0.5, 2.0), "odd": (0.37, 1.9), "unit": (None, None)}
PAGE_LOCAL_A, PAGE_LOCAL_B = NVFP4_PAGE_LOCAL_VIEWS  # "nvfp4_pages", "nvfp4_head_slots"


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

def nvfp4_kwargs(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal, *, dtype=BF16,
                 scales="cpu", scale_dtype=NVFP4, seed=0, **options):
    """build_case with NVFP4 K/V (view: a K/V view, or one of NVFP4_PAGE_LOCAL_VIEWS for
    page-local scales), the global scales SCALES[scales], the block scales viewed as
    scale_dtype (uint8 or float8_e4m3fn). The same seed gives the same packed bytes and scale
    values whatever the layout, view or form."""
    kwargs = build_case(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal,
                        q_dtype=dtype, kv_dtype="nvfp4", seed=seed, **options)
    for name, value in zip(GLOBAL_SCALES, SCALES[scales]):
        if value is not None:
            kwargs[name] = value
    for name in ("k_scale", "v_scale"):
        kwargs[name] = kwargs[name].view(scale_dtype)
    return kwargs


def nvfp4_case(name, seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal, *,
               scalars=None, **options):
    """A gpu_harness.Case with NVFP4 K/V (nvfp4_kwargs), scalars added to every evaluation."""
    kwargs = nvfp4_kwargs(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal,
                          **options)
    kwargs.update(scalars or {})
    case = Case(name, kwargs)
    for key in ("k", "v"):
        x = case.gpu[key]
        assert x.dtype == NVFP4 and x.shape[-1] == HEAD_DIM // 2, (
            f"[{name}] {key} is {x.dtype} {tuple(x.shape)}, not packed NVFP4")
    view = options.get("view")
    assert is_page_local(case) == (view in NVFP4_PAGE_LOCAL_VIEWS), (
        f"[{name}] view {view!r} gave k_scale of shape {tuple(case.gpu['k_scale'].shape)}")
    return case


def label(*parts, **named):
    return "-".join(["nvfp4"] + [str(p) for p in parts] + [f"{k}{v}" for k, v in named.items()])


def is_page_local(case):
    return case.cpu["k_scale"].dim() == 4


# ---------------------------------------------------------------------------------------------
# Scale forms: the swizzled table from logical scales, the logical scales of page-local views
# ---------------------------------------------------------------------------------------------

def swizzled_table(scales, paged):
    """Logical scale bytes of flat (total_k, Hkv, 8) or paged (num_pages, Hkv, 128, 8) K/V ->
    the 1-D swizzled 128x4 table (contract section 6: row token * Hkv + head flat,
    (page * Hkv + head) * 128 + token paged), padded to whole 128-row tiles with zeros."""
    scales = scales.view(torch.uint8)
    if paged:
        num_pages, num_kv_heads, tokens, cols = scales.shape
        rows = ((torch.arange(num_pages).view(-1, 1, 1) * num_kv_heads
                 + torch.arange(num_kv_heads).view(1, -1, 1)) * BLOCK_SIZE
                + torch.arange(tokens).view(1, 1, -1))
    else:
        num_tokens, num_kv_heads, cols = scales.shape
        rows = torch.arange(num_tokens).view(-1, 1) * num_kv_heads + torch.arange(num_kv_heads)
    padded_rows = -(-rows.numel() // BLOCK_SIZE) * BLOCK_SIZE
    table = torch.zeros(padded_rows * cols, dtype=torch.uint8)
    offsets = swizzled_scale_offsets(rows.unsqueeze(-1), torch.arange(cols), cols)
    table[offsets.reshape(-1)] = scales.reshape(-1)
    return table


def _token_quad_index():
    """(128, 8) plane byte of (token t, group s) in V's token-quad order (section 6)."""
    token = torch.arange(BLOCK_SIZE).view(-1, 1)
    group = torch.arange(SCALES_PER_ROW).view(1, -1)
    return (token // 4) * 4 * SCALES_PER_ROW + group * 4 + token % 4


def page_local_logical_scales(scale, token_quads):
    """4-D page-local scales (num_pages, Hkv, 128, 8), uint8 or float8 -> the logical scale
    bytes of (page, head, token, group): K's are linear, V's in token-quad order."""
    planes = scale.view(torch.uint8).contiguous()
    if not token_quads:
        return planes
    flat = planes.reshape(*planes.shape[:2], BLOCK_SIZE * SCALES_PER_ROW)
    return flat[:, :, _token_quad_index()]


def swizzled_twin(case):
    """A page-local case with the same K/V bytes and its scales moved to the swizzled 1-D
    tables: the same logical data in the other form."""
    kw = case.cpu
    k_table = swizzled_table(page_local_logical_scales(kw["k_scale"], False), paged=True)
    v_table = swizzled_table(page_local_logical_scales(kw["v_scale"], True), paged=True)
    return Case(f"{case.name} (its scales swizzled)", dict(kw, k_scale=k_table, v_scale=v_table))


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

def check_result(case, got, rows=None):
    """check_gpu_result (the CPU backend and the fp64 reference read page-local scales too);
    with page-local scales also bitwise against the swizzled twin's GPU call."""
    check_gpu_result(case, got, rows=rows)
    if is_page_local(case):
        want = run_gpu(swizzled_twin(case), lse=got[1] is not None)
        assert_same(case.name, "page-local vs the same pages with swizzled scales", got, want)
    return got


def check(case, rows=None):
    """One poisoned call, checked (check_result)."""
    return check_result(case, run_gpu(case), rows=rows)


def run_profiled(case):
    """run_gpu under the profiler: (out, lse, lse_t) and the names of the CUDA kernels run."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        got = run_gpu(case)
    names = {event.key for event in prof.key_averages() if event.device_type.name == "CUDA"}
    return got, names


def assert_kernel(name, names, kernel):
    other = "prefill_kernel" if kernel == "decode_kernel" else "decode_kernel"
    assert any(kernel in launched for launched in names), (
        f"[{name}] expected the {kernel}, launched {sorted(names)}")
    assert not any(other in launched for launched in names), (
        f"[{name}] expected the {kernel} alone, launched {sorted(names)}")


# ---------------------------------------------------------------------------------------------
# The CPU suite's NVFP4 cases (test_cpu_backend.py, test_nvfp4_page_local.py), on CUDA tensors
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [BF16, FP16], ids=dtype_id)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_cpu_suite_flat_and_paged(causal, dtype):
    """test_kv_dtypes_flat_and_paged with NVFP4 K/V: the flat call right; the paged call (pages
    in random order, noise pages, swizzled scales) right and bitwise equal to it."""
    seqlens_q, seqlens_k, hq, hkv, topk = test_cpu_backend.DTYPE_SHAPE
    base = label("cpu-suite", dtype_id(dtype), "causal" if causal else "full")
    scalars = dict(lse_temperature_scale=test_cpu_backend.TEMPERATURE)
    flat, paged = (nvfp4_case(f"{base}-{layout}", seqlens_q, seqlens_k, hq, hkv, topk, causal,
                              dtype=dtype, scales="unit", seed=11, layout=layout,
                              scalars=scalars)
                   for layout in ("flat", "paged"))
    want = check(flat)
    got = check(paged)
    assert_same(paged.name, "paged vs flat", got, want)


@pytest.mark.parametrize("view", ["packed", "nhd"])
@pytest.mark.parametrize("layout", ["flat", "paged"])
def test_cpu_suite_views_read_in_place(layout, view):
    """test_kv_views_read_in_place with NVFP4 K/V: the halves of one packed K|V cache (token
    stride 2 x 64 bytes) and NHD storage permuted to HND give the contiguous result bitwise."""
    shape = ([70, 33], [900, 1300], 8, 2, 8, True)
    base = label("cpu-suite-view", layout, view)
    contiguous = nvfp4_case(f"{base}-contiguous", *shape, layout=layout, seed=5)
    strided = nvfp4_case(base, *shape, layout=layout, view=view, seed=5)
    assert not strided.gpu["k"].is_contiguous(), f"[{base}] the {view} K should be a view"
    want = run_gpu(contiguous)
    got = check(strided)
    assert_same(base, "view vs contiguous K/V", got, want)


# (name, q lens, k lens, Hq, Hkv, topk, causal, view, scale dtype, q dtype, page order): the CPU
# page-local suite's shapes (topk 64 over 65 blocks), and the production heads.
PAGE_LOCAL_CASES = [
    ("topk1-g1", [30, 17], [300, 700], 2, 2, 1, True, PAGE_LOCAL_A, NVFP4, BF16, "in_order"),
    ("topk16-g16", [40, 25], [1000, 2100], 32, 2, 16, False, PAGE_LOCAL_B, E4M3, FP16, "random"),
    ("topk64-g16", [24], [8300], 32, 2, 64, True, PAGE_LOCAL_A, E4M3, BF16, "random"),
    ("m3-mixed", MIXED_Q, MIXED_K, *M3, 16, True, PAGE_LOCAL_B, NVFP4, BF16, "random"),
    ("tp4-mixed", MIXED_Q, MIXED_K, *TP4, 16, False, PAGE_LOCAL_A, NVFP4, FP16, "in_order"),
    ("g128", [150, 90], [2100, 1300], 128, 1, 16, True, PAGE_LOCAL_B, NVFP4, BF16, "random"),
]


@pytest.mark.parametrize("spec", PAGE_LOCAL_CASES, ids=[
    f"{s[0]}-{s[7]}-{str(s[8]).replace('torch.', '')}-{dtype_id(s[9])}-{s[10]}"
    for s in PAGE_LOCAL_CASES])
def test_page_local_scales(spec):
    """test_nvfp4_page_local.py's case on the GPU: page-local scales (K linear, V in token-quad
    order, 0x7F padding after every piece, as uint8 or float8), right, bitwise equal to the
    same pages with swizzled scales (check_result) and to the flat call on the same data."""
    tag, lens_q, lens_k, hq, hkv, topk, causal, view, scale_dtype, dtype, order = spec
    base = label("page-local", tag, view, dtype_id(dtype), order)
    options = dict(dtype=dtype, seed=601 + hq + topk,
                   scalars=dict(lse_temperature_scale=test_cpu_backend.TEMPERATURE))
    case = nvfp4_case(base, lens_q, lens_k, hq, hkv, topk, causal, layout="paged", view=view,
                      page_order=order, scale_dtype=scale_dtype, **options)
    assert not case.gpu["k"].is_contiguous(), f"[{base}] K should be a view into the pages"
    got = check(case)
    flat = nvfp4_case(f"{base}-flat", lens_q, lens_k, hq, hkv, topk, causal, layout="flat",
                      **options)
    assert_same(base, "page-local paged vs flat", got, run_gpu(flat))


def test_swizzled_scale_forms():
    """The swizzled table as 1-D and 2-D (rows of 8) uint8 and float8_e4m3fn tensors, and inside
    a larger table (NaN bytes past the needed ones, never read): bitwise the 1-D uint8 result,
    flat and paged."""
    for layout in ("flat", "paged"):
        case = nvfp4_case(label("scale-forms", layout), [90, 130], [1500, 2600], 16, 2, 16, True,
                          layout=layout, seed=611)
        want = check(case)
        k_table, v_table = case.gpu["k_scale"], case.gpu["v_scale"]
        forms = {"2-D uint8": lambda t: t.view(-1, SCALES_PER_ROW),
                 "1-D float8": lambda t: t.view(E4M3),
                 "2-D float8": lambda t: t.view(E4M3).view(-1, SCALES_PER_ROW),
                 "oversized 1-D": lambda t: torch.cat(
                     [t, torch.full((4096,), 0x7F, dtype=torch.uint8, device=DEVICE)])}
        for what, form in forms.items():
            got = run_gpu(case, k_scale=form(k_table), v_scale=form(v_table))
            assert_same(case.name, f"{what} scales vs 1-D uint8", got, want)


# ---------------------------------------------------------------------------------------------
# Prefill
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [BF16, FP16], ids=dtype_id)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("heads", [M3, TP4], ids=["m3", "tp4"])
def test_prefill_mixed_requests(heads, causal, dtype):
    """Ragged requests (120 and 33 rows over 2000 and 700 keys, one without query rows over 129
    keys, 700 rows over 3100 keys) at the two production head layouts; bf16 q flat with the CPU
    suite's global scales, fp16 q paged (page-local scales when causal) with 0.37 and 1.9."""
    hq, hkv = heads
    if dtype == BF16:
        scales, layout, view = "cpu", "flat", "contiguous"
    else:
        scales, layout, view = "odd", "paged", PAGE_LOCAL_A if causal else "contiguous"
    pattern = "indexer" if causal else "clustered"
    name = label("prefill-mixed", dtype_id(dtype), scales, layout, view, pattern, hq=hq, hkv=hkv,
                 causal=causal)
    case = nvfp4_case(name, MIXED_Q, MIXED_K, hq, hkv, 16, causal, dtype=dtype, scales=scales,
                      pattern=pattern, layout=layout, view=view, seed=301 + hq + causal)
    check(case)


@pytest.mark.parametrize("heads,causal", GROUP_CASES, ids=[
    f"g{hq // hkv}-{'causal' if c else 'full'}" for (hq, hkv), c in GROUP_CASES])
def test_group_sizes(heads, causal):
    """Group sizes 1, 3, 16, 64 and 128 (test_gpu_fp8_kv.GROUP_CASES)."""
    hq, hkv = heads
    name = label("group", hq=hq, hkv=hkv, causal=causal)
    case = nvfp4_case(name, [150, 90], [2100, 1300], hq, hkv, 16, causal, seed=311 + hq)
    check(case)


@pytest.mark.parametrize("topk,dtype", TOPK_CASES,
                         ids=[f"topk{t}-{dtype_id(d)}" for t, d in TOPK_CASES])
def test_topk(topk, dtype):
    """topk 1, 16, 33 and 64 (test_gpu_fp8_kv.TOPK_CASES); topk 64 needs more than 64 blocks:
    8300 keys are 65."""
    name = label("topk", dtype_id(dtype), topk=topk)
    case = nvfp4_case(name, [120, 40], [8300, 900], 16, 2, topk, True, dtype=dtype, seed=321)
    check(case)


# (global scales, layout, view, q dtype)
SCALE_CASES = [("cpu", "flat", "contiguous", BF16), ("odd", "flat", "contiguous", FP16),
               ("odd", "paged", PAGE_LOCAL_B, BF16), ("unit", "flat", "contiguous", FP16),
               ("unit", "paged", "contiguous", BF16), ("pow2", "paged", "contiguous", FP16)]


@pytest.mark.parametrize("scales,layout,view,dtype", SCALE_CASES,
                         ids=[f"{s}-{l}-{v}-{dtype_id(d)}" for s, l, v, d in SCALE_CASES])
def test_global_scales(scales, layout, view, dtype):
    """The global scales multiply the scores and the output (section 6); "odd" also sets
    softmax_scale, "unit" passes no global scale at all."""
    name = label("scales", scales, layout, view, dtype_id(dtype))
    scalars = dict(softmax_scale=0.05) if scales == "odd" else {}
    case = nvfp4_case(name, [90, 130], [1500, 2600], 16, 2, 16, True, dtype=dtype, scales=scales,
                      layout=layout, view=view, seed=331, scalars=scalars)
    if scales == "unit":
        assert "k_global_scale" not in case.gpu and "v_global_scale" not in case.gpu, (
            f"[{name}] the unit-scale case must leave the global scales to their default")
    check(case)


@pytest.mark.parametrize("layout,view", [("flat", "contiguous"), ("paged", "contiguous"),
                                         ("paged", PAGE_LOCAL_A)],
                         ids=["flat", "paged", f"paged-{PAGE_LOCAL_A}"])
def test_device_resident_global_scales(layout, view):
    """One-element float32 tensors on q's device (section 6), of shape () and (1,): powers of
    two give the float form's result bitwise, others agree within section 7."""
    base = label("device-scales", layout, view)
    shape = ([90, 130], [1500, 2600], 16, 2, 16, True)
    pow2 = nvfp4_case(f"{base}-pow2", *shape, scales="pow2", layout=layout, view=view, seed=333)
    want = run_gpu(pow2)
    k_pow2, v_pow2 = SCALES["pow2"]
    got = run_gpu(pow2, k_global_scale=_device_scale(k_pow2, ()),
                  v_global_scale=_device_scale(v_pow2, (1,)))
    assert_same(pow2.name, f"device scales {k_pow2}, {v_pow2} vs the same floats", got, want)
    odd = nvfp4_case(f"{base}-odd", *shape, scales="odd", layout=layout, view=view, seed=333)
    k_odd, v_odd = SCALES["odd"]
    odd.with_gpu(k_global_scale=_device_scale(k_odd, (1,)), v_global_scale=_device_scale(v_odd, ()))
    check(odd)


@pytest.mark.parametrize("kernel", ["decode", "prefill"])
def test_device_scales_read_at_graph_replay(kernel):
    """A call captured with device-resident scales replays with the values the tensors hold at
    replay time (section 6): powers of two written after capture give the eager result for those
    floats bitwise, other values the eager result with the tensors bitwise and a right result.
    decode: 16 one-token requests (the decode kernel); prefill: two requests of 90 and 130
    rows (the prefill kernel)."""
    if kernel == "decode":
        case = decode_case(16, 1, scales="pow2", seed=334, tag="graph-device-scales")
    else:
        case = nvfp4_case(label("graph-device-scales", "prefill"), [90, 130], [1500, 2600], 16,
                          2, 16, True, scales="pow2", layout="paged", seed=335)
    name = case.name
    k_scale = _device_scale(case.gpu["k_global_scale"], ())
    v_scale = _device_scale(case.gpu["v_global_scale"], (1,))
    kwargs = dict(case.gpu, k_global_scale=k_scale, v_global_scale=v_scale)
    out = torch.full_like(kwargs["q"], math.nan)

    def call():
        return flashmsa.msa_sparse_attention(**kwargs, out=out, return_temperature_lse=True)

    graph, captured = capture_graph(name, call)
    replay(name, graph, captured)
    assert_same(name, "replay vs eager with the captured scales", captured, run_gpu(case))
    for k_value, v_value, pow2 in ((1 / 4, 1 / 8, True), (0.37, 1.9, False)):
        k_scale.fill_(k_value)
        v_scale.fill_(v_value)
        replay(name, graph, captured)
        replayed = tuple(x.clone() for x in captured)
        values = f"{k_value}, {v_value}"
        assert_same(name, f"replay after writing {values} vs eager with the tensors", replayed,
                    run_gpu(case, k_global_scale=k_scale, v_global_scale=v_scale))
        case.with_gpu(k_global_scale=k_value, v_global_scale=v_value)
        if pow2:
            assert_same(name, f"replay after writing {values} vs eager with those floats",
                        replayed, run_gpu(case))
        check_result(case, replayed)


@pytest.mark.parametrize("temperature,dtype", [(0.5, BF16), (2.0, FP16)],
                         ids=["T0.5-bf16", "T2.0-fp16"])
def test_temperature_lse(temperature, dtype):
    name = label("lse_t", dtype_id(dtype), T=temperature)
    case = nvfp4_case(name, [100, 60], [2000, 700], 16, 4, 16, True, dtype=dtype, scales="odd",
                      seed=341, scalars=dict(lse_temperature_scale=temperature))
    check(case)


def test_lse_only():
    """return_softmax_lse alone returns (out, lse), both right."""
    name = label("lse-only")
    case = nvfp4_case(name, [64, 100], [1000, 1900], 8, 2, 16, True, seed=342)
    out = torch.full_like(case.gpu["q"], math.nan)
    result = flashmsa.msa_sparse_attention(**case.gpu, return_softmax_lse=True, out=out)
    synchronize(name)
    assert isinstance(result, tuple) and len(result) == 2, f"[{name}] expected (out, lse)"
    assert result[0] is out, f"[{name}] out= was not returned"
    check_gpu_result(case, (result[0], result[1], None))


Q_OFFSETS = [(None, BF16), (0, BF16), (700, BF16), (-50, FP16), ([1200, 3], BF16),
             ([-200, 5000], FP16)]


@pytest.mark.parametrize("q_offset,dtype", Q_OFFSETS,
                         ids=["none", "int0", "int700", "int-50-fp16", "tensor",
                              "tensor_neg-fp16"])
def test_explicit_q_offset(q_offset, dtype):
    """q_offset None (aligned to the keys' end), ints and per-request tensors, including
    positions that read nothing; the tensor ones on paged K/V with page-local scales."""
    name = label("q_offset", dtype_id(dtype), q_offset=q_offset)
    paged = isinstance(q_offset, list)
    case = nvfp4_case(name, [180, 64], [2000, 1500], 16, 2, 16, True, dtype=dtype,
                      q_offset=q_offset, layout="paged" if paged else "flat",
                      view=PAGE_LOCAL_B if paged else "contiguous", seed=351)
    check(case)


@pytest.mark.parametrize("layout,view", [("flat", "contiguous"), ("paged", PAGE_LOCAL_A)],
                         ids=["flat", f"paged-{PAGE_LOCAL_A}"])
def test_rows_that_read_nothing(layout, view):
    """Every way a row reads nothing: a request without keys, one without query rows, negative
    causal positions, an index list that starts with a negative id, only out-of-range ids.
    out exactly 0 and lse, lse_t exactly -inf there; every other row right and finite."""
    name = label("empty-rows", layout, view)
    case = nvfp4_case(name, [40, 0, 50, 60, 70], [0, 500, 900, 1300, 2000], 8, 2, 8, True,
                      q_offset=[0, 0, -30, 0, 1930], layout=layout, view=view, seed=361)
    q2k = case.cpu["q2k_indices"].clone()
    third = 90                                          # request 3's first row
    q2k[:, third:third + 20, 0] = -1
    q2k[:, third + 20:third + 40, :] = 11               # 1300 keys are 11 blocks: 11 is past them
    case.with_gpu(q2k_indices=q2k.to(DEVICE))
    out, lse, lse_t = check(case)
    dead = torch.zeros(out.shape[0], dtype=torch.bool, device=DEVICE)
    dead[:40] = True                                    # request 0: no keys
    dead[40:70] = True                                  # request 2: positions -30 .. -1
    dead[third:third + 40] = True
    assert bool((out[dead] == 0).all()), f"[{name}] rows that read nothing are not exactly 0"
    for what, x in (("lse", lse), ("lse_t", lse_t)):
        assert bool(torch.isneginf(x[dead]).all()), f"[{name}] {what} is not -inf on empty rows"
        assert bool(torch.isfinite(x[~dead]).all()), f"[{name}] {what} not finite on read rows"


GARBAGE_CASES = [("flat", "contiguous", BF16), ("paged", "contiguous", FP16),
                 ("paged", PAGE_LOCAL_B, BF16)]


@pytest.mark.parametrize("layout,view,dtype", GARBAGE_CASES,
                         ids=[f"{l}-{v}-{dtype_id(d)}" for l, v, d in GARBAGE_CASES])
def test_garbage_indices(layout, view, dtype):
    """No fault, and the contract's result, whatever the index values (section 4). Paged: the
    page table's unused entries hold garbage too."""
    name = label("garbage", layout, view, dtype_id(dtype))
    case = nvfp4_case(name, [150, 97], [1800, 1000], 16, 2, 16, True, dtype=dtype, layout=layout,
                      view=view, seed=371)
    q2k = garbage_indices(case.cpu["q2k_indices"], num_blocks_min=8,
                          generator=torch.Generator().manual_seed(371))
    changes = dict(q2k_indices=q2k.to(DEVICE))
    if layout == "paged":
        table = case.cpu["page_table"].clone()
        table[table < 0] = 2 ** 31 - 1                  # unused entries: never dereferenced
        changes["page_table"] = table.to(DEVICE)
    case.with_gpu(**changes)
    check(case)


def test_prefill_forced_splits(launch_overrides):
    """splits=3 (a launch override the NVFP4 prefill path takes): the prefill kernel's partials
    over three KV splits, merged; right on the M3 ragged requests, paged with page-local scales,
    and bitwise equal to the swizzled form under the same split (check_result)."""
    launch_overrides(splits=3)
    name = label("prefill-splits3", "paged", PAGE_LOCAL_B)
    case = nvfp4_case(name, MIXED_Q, MIXED_K, *M3, 16, True, layout="paged", view=PAGE_LOCAL_B,
                      pattern="indexer", seed=381, scalars=dict(lse_temperature_scale=0.7))
    got, kernels = run_profiled(case)
    assert_kernel(name, kernels, "prefill_kernel")
    check_result(case, got)


# (name, q lens, k lens, Hq, Hkv, topk, causal, pattern, q dtype)
LAYOUT_CASES = [
    ("gqa2_full", [100, 37], [2048, 700], 4, 2, 16, False, "random", BF16),
    ("m3", [200, 50], [3000, 1800], 64, 4, 16, True, "clustered", BF16),
    ("m3", [200, 50], [3000, 1800], 64, 4, 16, True, "clustered", FP16),
    ("tp4_mixed", MIXED_Q, MIXED_K, 16, 1, 16, True, "indexer", BF16),
]
LAYOUTS = [("paged", "contiguous"), ("paged", "packed"), ("paged", "nhd"),
           ("paged", PAGE_LOCAL_A), ("paged", PAGE_LOCAL_B), ("flat", "packed"), ("flat", "nhd")]


@pytest.mark.parametrize("spec", LAYOUT_CASES, ids=[f"{s[0]}-{dtype_id(s[8])}"
                                                    for s in LAYOUT_CASES])
def test_layouts_equal_flat_bitwise(spec):
    """test_gpu_layouts.py with NVFP4 K/V: paged (permuted pages) with swizzled or page-local
    scales, packed K|V halves and NHD caches hold the flat contiguous case's bytes and scale
    values (same seed), so their outputs equal its bitwise; the flat one is checked."""
    tag, lens_q, lens_k, hq, hkv, topk, causal, pattern, dtype = spec
    base = label("layout", tag, dtype_id(dtype))

    def build(layout, view):
        return nvfp4_case(f"{base}-{layout}-{view}", lens_q, lens_k, hq, hkv, topk, causal,
                          dtype=dtype, pattern=pattern, seed=391, layout=layout, view=view)

    flat = build("flat", "contiguous")
    want = check(flat)
    for layout, view in LAYOUTS:
        other = build(layout, view)
        got = run_gpu(other)
        assert_same(other.name, "vs flat contiguous", got, want)
        check_inputs_unchanged(other)


# ---------------------------------------------------------------------------------------------
# Every E2M1 code times every finite E4M3 scale decoded exactly (section 6: a value is
# e2m1 * e4m3_scale)
# ---------------------------------------------------------------------------------------------

E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                            -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float64)
# Every finite E4M3 byte (all but the NaNs 0x7F and 0xFF): zeros, subnormals, negatives, +-448.
FINITE_E4M3 = torch.tensor([b for b in range(256) if b & 0x7F != 0x7F], dtype=torch.uint8)
PROBE_KEYS = 8              # 8 keys x 4 KV heads x 8 groups = 256 scales: each finite byte once
PROBE_NOISE_SCALES = (0x20, 0x58)   # noise scales 1/8 .. 16 (never read)
EXACT_SCALES = {"unit": (None, None), "pow2": (1 / 64, 1 / 16)}
# (kernel, scale form, q dtype, global scales)
EXACT_CASES = [(kernel, form, dtype, scales)
               for kernel in ("decode", "prefill")
               for form in ("flat", "paged", PAGE_LOCAL_A, PAGE_LOCAL_B)
               for dtype, scales in ((BF16, "unit"), (FP16, "pow2"))
               if form != PAGE_LOCAL_B or dtype == BF16]


def _probe_bytes(scale_shift, code_shift):
    """(codes (PROBE_KEYS, Hkv, 128) in 0..15, scale bytes (PROBE_KEYS, Hkv, 8)): group g (of
    the 256 groups of 16 elements) has scale byte FINITE_E4M3[(g + scale_shift) % 254] and holds
    all 16 codes, rolled by g + code_shift, so that every code sits in both nibbles."""
    hkv = M3[1]
    groups = torch.arange(PROBE_KEYS * hkv * SCALES_PER_ROW).view(PROBE_KEYS, hkv, SCALES_PER_ROW)
    scales = FINITE_E4M3[(groups + scale_shift) % FINITE_E4M3.numel()]
    codes = (torch.arange(16) + groups.unsqueeze(-1) + code_shift) % 16
    return codes.reshape(PROBE_KEYS, hkv, HEAD_DIM), scales


def _pack(codes):
    """E2M1 codes (..., D) -> packed bytes (..., D // 2), the low nibble the even element."""
    codes = codes.to(torch.uint8)
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def _decoded(codes, scales):
    """The exact float64 values of codes under their scale bytes."""
    scale_values = scales.view(E4M3).double().repeat_interleave(16, dim=-1)
    return E2M1_VALUES[codes.long()] * scale_values


def _exact_case(kernel, form, dtype, scales):
    """Row r of request b reads key j = key_of[b] alone (its list: block 0, then -1), with
    q[r, h] = e_d, d = (i * 16 + h % 16) mod 128 for the row's index i in its request (group 16,
    M3 heads), so that with softmax_scale 1: lse[r, h] = k_global_scale * K[j, h // 16, d] and
    out[r, h, :] = v_global_scale * V[j, h // 16, :], exact for these scales (the probability is
    1; the products e2m1 x e4m3 have at most 6 significant bits and lie in 2^-10 .. 2688, fp16
    and bf16 numbers, none subnormal, nor after the powers of two). The K and V of the 8 keys
    hold every code under every finite scale byte (_probe_bytes).
    decode: 64 one-row requests (8 a key: 8 x 16 heads cover the 128 dims); prefill: 8 requests
    of 128 rows. flat: each request its own copy of its key; paged: each key at token 0 of its
    own page (random order, noise past token 0 and in two spare pages), the scales swizzled or
    page-local (form)."""
    hq, hkv = M3
    group = hq // hkv
    rows_per_request, requests_per_key = (1, HEAD_DIM // group) if kernel == "decode" else (128, 1)
    num_requests = PROBE_KEYS * requests_per_key
    key_of = torch.arange(num_requests) // requests_per_key
    index = (torch.arange(rows_per_request).repeat(num_requests) if kernel == "prefill"
             else torch.arange(num_requests) % requests_per_key)   # i of each row
    rows = num_requests * rows_per_request
    row_key = key_of.repeat_interleave(rows_per_request)
    dims = (index.view(-1, 1) * group + torch.arange(hq).view(1, -1) % group) % HEAD_DIM
    q = torch.zeros(rows, hq, HEAD_DIM, dtype=dtype)
    q[torch.arange(rows).view(-1, 1), torch.arange(hq).view(1, -1), dims] = 1
    k_codes, k_scales = _probe_bytes(0, 0)
    v_codes, v_scales = _probe_bytes(77, 5)
    topk = 16
    q2k = torch.full((hkv, rows, topk), -1, dtype=torch.int32)
    q2k[:, :, 0] = 0
    kwargs = dict(q=q, q2k_indices=q2k, causal=False, softmax_scale=1.0,
                  lse_temperature_scale=0.5,
                  cu_seqlens_q=torch.arange(num_requests + 1, dtype=torch.int32) * rows_per_request)
    for name, value in zip(GLOBAL_SCALES, EXACT_SCALES[scales]):
        if value is not None:
            kwargs[name] = value
    if form == "flat":
        kwargs.update(k=_pack(k_codes[key_of]), v=_pack(v_codes[key_of]),
                      k_scale=swizzled_table(k_scales[key_of], paged=False),
                      v_scale=swizzled_table(v_scales[key_of], paged=False),
                      cu_seqlens_k=torch.arange(num_requests + 1, dtype=torch.int32))
    else:
        generator = torch.Generator().manual_seed(401)
        pages = PROBE_KEYS + 2
        shape = (pages, hkv, BLOCK_SIZE)
        order = torch.randperm(pages, generator=generator)[:PROBE_KEYS]
        stored = []
        for codes, scale_bytes in ((k_codes, k_scales), (v_codes, v_scales)):
            all_codes = torch.randint(0, 16, (*shape, HEAD_DIM), generator=generator)
            all_scales = torch.randint(*PROBE_NOISE_SCALES, (*shape, SCALES_PER_ROW),
                                       generator=generator).to(torch.uint8)
            all_codes[order, :, 0] = codes
            all_scales[order, :, 0] = scale_bytes
            stored.append((all_codes, all_scales))
        (k_all, k_all_scales), (v_all, v_all_scales) = stored
        if form == "paged":
            kwargs.update(k=_pack(k_all), v=_pack(v_all),
                          k_scale=swizzled_table(k_all_scales, paged=True),
                          v_scale=swizzled_table(v_all_scales, paged=True))
        else:
            # msa_inputs lays the pages out (on zeros); the probe's bytes are then written into
            # its views, V's scales in token-quad order.
            zeros = torch.zeros(*shape, HEAD_DIM)
            k, v, k_scale, v_scale = msa_inputs._place_nvfp4_page_local(zeros, zeros, form)
            k.copy_(_pack(k_all))
            v.copy_(_pack(v_all))
            k_scale.copy_(k_all_scales)
            quads = torch.empty_like(v_all_scales)
            quads.view(pages, hkv, -1)[:, :, _token_quad_index()] = v_all_scales
            v_scale.copy_(quads)
            kwargs.update(k=k, v=v, k_scale=k_scale, v_scale=v_scale)
        kwargs.update(page_table=torch.stack([order[key_of], torch.full_like(key_of, -1)],
                                             1).int(),
                      seqused_k=torch.ones(num_requests, dtype=torch.int32))
    case = Case(label("exact-decoding", kernel, form, dtype_id(dtype), scales), kwargs)
    k_values, v_values = _decoded(k_codes, k_scales), _decoded(v_codes, v_scales)
    heads = torch.arange(hq) // group
    probe = dict(row_key=row_key, dims=dims, heads=heads, k_codes=k_codes, k_scales=k_scales,
                 v_codes=v_codes, v_scales=v_scales,
                 lse=k_values[row_key.view(-1, 1), heads.view(1, -1), dims],  # (rows, Hq)
                 out=v_values[row_key][:, heads])                             # (rows, Hq, D)
    return case, probe


def _scale_list(scale_bytes):
    distinct = sorted(set(int(b) for b in scale_bytes))
    shown = ", ".join(f"0x{b:02x}" for b in distinct[:16])
    return shown + (f", ... ({len(distinct)} scale bytes)" if len(distinct) > 16 else "")


@pytest.mark.parametrize("kernel,form,dtype,scales", EXACT_CASES, ids=[
    f"{k}-{f}-{dtype_id(d)}-{s}" for k, f, d, s in EXACT_CASES])
def test_every_e2m1_code_and_e4m3_scale_decodes_exactly(kernel, form, dtype, scales):
    case, probe = _exact_case(kernel, form, dtype, scales)
    name = case.name
    got, kernels = run_profiled(case)
    assert_kernel(name, kernels, f"{kernel}_kernel")
    out, lse, lse_t = check_result(case, got)
    k_scale, v_scale = (1.0 if s is None else s for s in EXACT_SCALES[scales])
    row_key, heads = probe["row_key"], probe["heads"]
    want_out = (probe["out"] * v_scale).to(dtype)
    wrong = out.cpu() != want_out                       # -0 and +0 compare equal
    if bool(wrong.any()):
        r, h, d = (int(i) for i in wrong.nonzero()[0])
        j, kv = int(row_key[r]), int(heads[h])
        bad = wrong.nonzero()
        bad_scales = probe["v_scales"][row_key[bad[:, 0]], heads[bad[:, 1]], bad[:, 2] // 16]
        raise AssertionError(
            f"[{name}] {int(wrong.sum())} of {out.numel()} output values differ from V's "
            f"e2m1 x e4m3 values times v_global_scale; first: row {r}, head {h}, dim {d}: "
            f"{float(out[r, h, d])!r}, want {float(want_out[r, h, d])!r} (V code "
            f"{int(probe['v_codes'][j, kv, d])}, scale byte "
            f"0x{int(probe['v_scales'][j, kv, d // 16]):02x}); wrong under the scale bytes "
            f"{_scale_list(bad_scales)}")
    for what, x, want in (("lse", lse, k_scale * probe["lse"]),
                          ("lse_t", lse_t, 0.5 * k_scale * probe["lse"])):
        error = (x.cpu().double() - want).abs()
        bad = error > 1e-6 * want.abs() + 1e-7
        if bool(bad.any()):
            r, h = (int(i) for i in bad.nonzero()[0])
            j, kv, d = int(row_key[r]), int(heads[h]), int(probe["dims"][r, h])
            where = bad.nonzero()
            bad_scales = probe["k_scales"][row_key[where[:, 0]], heads[where[:, 1]],
                                           probe["dims"][where[:, 0], where[:, 1]] // 16]
            raise AssertionError(
                f"[{name}] {what} is not the one score's value at {int(bad.sum())} of "
                f"{x.numel()} entries (K decoded wrong); first: row {r}, head {h}: "
                f"{float(x[r, h])!r}, want {float(want[r, h])!r} (K code "
                f"{int(probe['k_codes'][j, kv, d])} at dim {d}, scale byte "
                f"0x{int(probe['k_scales'][j, kv, d // 16]):02x}); wrong under the scale bytes "
                f"{_scale_list(bad_scales)}")


# ---------------------------------------------------------------------------------------------
# Decode and multi-token prediction (paged)
# ---------------------------------------------------------------------------------------------

def decode_case(batch, qlen, *, heads=M3, topk=16, dtype=BF16, scales="cpu", seed=0,
                lengths=None, view="contiguous", scalars=None, tag="decode"):
    """batch requests of qlen rows over test_gpu_fp8_kv.decode_lengths (one of 32768 keys, one
    of 32767 from batch 3, the rest ragged), paged (swizzled, or a page-local view)."""
    lengths = decode_lengths(batch, seed) if lengths is None else lengths
    hq, hkv = heads
    name = label(tag, dtype_id(dtype), scales, view, b=batch, q=qlen, hq=hq, hkv=hkv, topk=topk,
                 seed=seed)
    return nvfp4_case(name, [qlen] * batch, lengths, hq, hkv, topk, True, dtype=dtype,
                      scales=scales, seed=seed, layout="paged", view=view, scalars=scalars)


# (batch, query tokens per request, (Hq, Hkv), topk, q dtype, global scales, view)
DECODE_CASES = [
    (1, 1, M3, 16, BF16, "cpu", "contiguous"),
    (1, 1, TP4, 32, FP16, "odd", PAGE_LOCAL_A),
    (16, 1, M3, 16, BF16, "odd", "contiguous"),
    (16, 1, M3, 32, FP16, "cpu", PAGE_LOCAL_B),
    (64, 1, M3, 16, BF16, "unit", "contiguous"),
    (64, 1, TP4, 32, FP16, "pow2", PAGE_LOCAL_A),
    (4, 8, M3, 16, BF16, "cpu", "contiguous"),
    (4, 8, M3, 32, FP16, "unit", PAGE_LOCAL_B),
    (32, 8, M3, 16, BF16, "odd", "contiguous"),
    (32, 8, TP4, 32, BF16, "cpu", PAGE_LOCAL_A),
]


@pytest.mark.parametrize("spec", DECODE_CASES, ids=[
    f"b{b}-q{q}-hq{h[0]}-topk{t}-{dtype_id(d)}-{s}-{v}" for b, q, h, t, d, s, v in DECODE_CASES])
def test_decode(spec):
    batch, qlen, heads, topk, dtype, scales, view = spec
    case = decode_case(batch, qlen, heads=heads, topk=topk, dtype=dtype, scales=scales,
                       view=view, seed=411 + batch + qlen + topk)
    check(case)


@pytest.mark.parametrize("heads,batch", ONE_TOKEN_GROUPS,
                         ids=[f"hq{h[0]}_hkv{h[1]}-b{b}" for h, b in ONE_TOKEN_GROUPS])
def test_decode_one_token_group_sizes(heads, batch):
    """Hq 16 / Hkv 1, Hq 8 / Hkv 1 and a group of 3, one token a request: small batches split
    every tile, and groups under 16 heads reduce rows with no head behind them. Temperature
    LSE included."""
    lengths = [LONGEST] if batch == 1 else [LONGEST, 0, 127, 129, 4097, 9000, 256, 1, 20000]
    case = decode_case(batch, 1, heads=heads, lengths=lengths, seed=421 + batch,
                       scalars=dict(lse_temperature_scale=0.7), tag="decode-one-token-group")
    check(case)


# (tag, query rows a request, (Hq, Hkv), topk, the kernel that runs it): the decode kernel's
# limits (group 16, topk 32), group 1, and just past each limit; two tokens a request at a small
# batch fit one CTA per SM as single rows, so the decode kernel takes them too (split_rules.h).
ROUTES = [
    ("one-token-g16-topk1", 1, M3, 1, "decode_kernel"),
    ("one-token-g16-topk32", 1, M3, 32, "decode_kernel"),
    ("one-token-g1-topk16", 1, (4, 4), 16, "decode_kernel"),
    ("one-token-g16-topk33", 1, M3, 33, "prefill_kernel"),
    ("one-token-g17-topk16", 1, (68, 4), 16, "prefill_kernel"),
    ("two-tokens-g16-topk16", 2, M3, 16, "decode_kernel"),
]


@pytest.mark.parametrize("spec", ROUTES, ids=lambda s: s[0])
def test_decode_kernel_limits_garbage_indices(spec):
    """Five ragged requests with garbage ids (topk 1: a negative one, nothing read, or a huge
    one, ignored) and garbage in the page table's unused entries: the kernel that runs (by
    name) and the result. The lengths stay short (the long ones are test_decode's)."""
    tag, qlen, heads, topk, kernel = spec
    lengths = [3000, 4097, 129, 1000, 300]
    case = decode_case(len(lengths), qlen, heads=heads, topk=topk, lengths=lengths,
                       dtype=FP16 if heads[0] == 68 else BF16, seed=505 + topk,
                       tag=f"route-{tag}")
    if topk > 1:
        q2k = garbage_indices(case.cpu["q2k_indices"], num_blocks_min=2,
                              generator=torch.Generator().manual_seed(topk))
    else:
        q2k = case.cpu["q2k_indices"].clone()
        q2k[:, 0::3, 0] = -1
        q2k[:, 1::3, 0] = 2 ** 31 - 1
    table = case.cpu["page_table"].clone()
    table[table < 0] = 2 ** 31 - 1                      # unused entries: never dereferenced
    case.with_gpu(q2k_indices=q2k.to(DEVICE), page_table=table.to(DEVICE))
    got, kernels = run_profiled(case)
    assert_kernel(case.name, kernels, kernel)
    check_result(case, got)


@pytest.mark.parametrize("heads,qlen,view", [(M3, 4, PAGE_LOCAL_A), ((16, 2), 8, "contiguous")],
                         ids=["m3-q4-page-local", "g8-q8"])
def test_decode_multi_round_garbage_indices(heads, qlen, view):
    """Multi-token tiles of more than 32 index entries with duplicates, a negative mid-list,
    huge and out-of-range ids, and garbage in the page table's unused entries."""
    lengths = [LONGEST, 4097, 129, 1000, 9000, 20000]
    case = decode_case(len(lengths), qlen, heads=heads, lengths=lengths, view=view,
                       seed=431 + qlen, tag="decode-garbage")
    q2k = garbage_indices(case.cpu["q2k_indices"], num_blocks_min=2,
                          generator=torch.Generator().manual_seed(qlen))
    table = case.cpu["page_table"].clone()
    table[table < 0] = 2 ** 31 - 1
    case.with_gpu(q2k_indices=q2k.to(DEVICE), page_table=table.to(DEVICE))
    check(case)


# (q_offset, causal, heads)
OFFSETS = {"non-causal-tp4": (None, False, TP4),
           "per-request-m3": ([0, 7, -3, 40000, 129, 4096, 300, 19999], True, M3)}


@pytest.mark.parametrize("offsets", sorted(OFFSETS))
def test_one_token_flat_offsets(offsets):
    """Flat K/V, one token a request (the decode kernel's flat path), without causality and with
    per-request offsets (one negative, one past its keys)."""
    q_offset, causal, heads = OFFSETS[offsets]
    name = label("one-token-flat-offsets", offsets)
    case = nvfp4_case(name, [1] * len(ONE_TOKEN_LENGTHS), ONE_TOKEN_LENGTHS, *heads, 16, causal,
                      layout="flat", q_offset=q_offset, seed=504)
    check(case)


def test_one_token_pages_past_the_cached_row():
    """Requests of 140000 and 131073 keys (1094 and 1025 pages): each row's own block lies past
    a page-table row's first 1024 pages, the second one exactly at them; scale rows of pages
    past 2^10 too. Hq 16 / Hkv 1 keeps the cache small."""
    name = label("one-token-pages-past-cached-row")
    case = nvfp4_case(name, [1, 1, 1], [140000, 600, 131073], *TP4, 16, True, layout="paged",
                      seed=503)
    assert case.cpu["page_table"].shape[1] > 1024, (
        f"[{name}] the page table must be wider than 1024 pages: "
        f"{tuple(case.cpu['page_table'].shape)}")
    check(case)


@pytest.mark.parametrize("batch", [1, 5])
def test_one_token_flat_equals_paged(batch):
    """Same logical NVFP4 data (same seed) through a flat cache and a paged one with page-local
    scales, whose check also runs its pages with swizzled scales: all three bitwise equal
    (section 6), at batch 1 (splits) and 5."""
    lengths = ONE_TOKEN_LENGTHS[:batch]
    view = PAGE_LOCAL_A if batch == 1 else PAGE_LOCAL_B
    flat, paged = (nvfp4_case(label("one-token", layout, v, b=batch), [1] * batch, lengths, *M3,
                              16, True, layout=layout, view=v, seed=507)
                   for layout, v in (("flat", "contiguous"), ("paged", view)))
    want = check(flat)
    assert_same(paged.name, "paged (page-local scales) vs flat", check(paged), want)


GRAPH_DECODE = [(3, 1, "allocator", BF16, "contiguous"), (8, 8, "workspace", BF16, PAGE_LOCAL_A),
                (16, 1, "workspace", FP16, PAGE_LOCAL_B)]


@pytest.mark.parametrize("batch,qlen,scratch,dtype,view", GRAPH_DECODE, ids=[
    f"b{b}-q{q}-{s}-{dtype_id(d)}-{v}" for b, q, s, d, v in GRAPH_DECODE])
def test_decode_graph_replay_with_new_inputs(batch, qlen, scratch, dtype, view):
    """Capture once on step A's buffers, copy step B's inputs (new q, NVFP4 pages and scales,
    indices, page table and lengths; same shapes and global scales) into them, replay: equal to
    an eager call on B bitwise, and right."""
    step_a = decode_case(batch, qlen, dtype=dtype, view=view, seed=491)
    lengths_b = list(reversed(decode_lengths(batch, seed=491)))
    step_b = decode_case(batch, qlen, dtype=dtype, view=view, seed=492, lengths=lengths_b)
    name = f"graph-new-inputs-{scratch}-{step_b.name}"
    workspace = flashmsa.MSASparseAttentionWorkspace(DEVICE) if scratch == "workspace" else None
    captured, eager_b = replay_on_new_inputs(name, step_a, step_b, workspace)
    assert_same(name, "replay on new inputs vs eager", captured, eager_b)
    step_b.name = name
    check_result(step_b, eager_b)


# ---------------------------------------------------------------------------------------------
# Determinism and CUDA graphs (test_gpu_determinism.py)
# ---------------------------------------------------------------------------------------------

# (name, q lens, k lens, Hq, Hkv, topk, causal, pattern, layout, view, q dtype)
DETERMINISM_CASES = [
    ("m3_ragged", [300, 1, 100, 8], [4000, 300, 2500, 9000], 64, 4, 16, True, "random", "flat",
     "contiguous", BF16),
    ("tp4_full", [300, 90], [2000, 1000], 16, 1, 16, False, "clustered", "paged", "contiguous",
     FP16),
    ("m3_decode", [1] * 8, [9000, 0, 127, 4097, 129, 3000, 256, 2000], 64, 4, 16, True,
     "indexer", "paged", PAGE_LOCAL_A, BF16),
]


def _determinism_case(spec, suffix):
    tag, lens_q, lens_k, hq, hkv, topk, causal, pattern, layout, view, dtype = spec
    return nvfp4_case(label(suffix, tag, layout, view, dtype_id(dtype)), lens_q, lens_k, hq, hkv,
                      topk, causal, dtype=dtype, pattern=pattern, layout=layout, view=view,
                      seed=531)


@pytest.mark.parametrize("spec", DETERMINISM_CASES, ids=lambda s: s[0])
def test_two_calls_bitwise_equal(spec):
    case = _determinism_case(spec, "twice")
    first = check(case)
    second = run_gpu(case)
    assert_same(case.name, "second call vs first", second, first)


GRAPH_CASES = [(DETERMINISM_CASES[0], "allocator"), (DETERMINISM_CASES[1], "workspace"),
               (DETERMINISM_CASES[2], "workspace")]


@pytest.mark.parametrize("spec,scratch", GRAPH_CASES,
                         ids=[f"{s[0]}-{scratch}" for s, scratch in GRAPH_CASES])
def test_graph_replay_equals_eager(spec, scratch):
    case = _determinism_case(spec, f"graph-{scratch}")
    workspace = flashmsa.MSASparseAttentionWorkspace(DEVICE) if scratch == "workspace" else None
    # The eager call also warms the workspace: capture may not grow it (section 9).
    eager = check_result(case, run_gpu(case, workspace=workspace))
    out = torch.full_like(case.gpu["q"], math.nan)

    def call():
        return flashmsa.msa_sparse_attention(**case.gpu, out=out, return_temperature_lse=True,
                                             workspace=workspace)

    graph, captured = capture_graph(case.name, call)
    for attempt in range(2):
        replay(case.name, graph, captured)
        assert_same(case.name, f"replay {attempt} vs eager", captured, eager)
    if workspace is not None:
        assert_same(case.name, "without vs with workspace", run_gpu(case), eager)


# ---------------------------------------------------------------------------------------------
# The two prefill paths: the union tile on stages rewritten by the converter warps (default) and
# the token warps (override token_warps=1)
# ---------------------------------------------------------------------------------------------

# (name, q lens, k lens, Hq, Hkv, topk, causal, pattern): a long request whose tiles' unions
# cycle the two stages many times, with blocks a warpgroup skips; ragged M3 requests.
PATH_CASES = [
    ("m3-long-random", [300], [32768], 64, 4, 16, True, "random"),
    ("m3-mixed-indexer", MIXED_Q, MIXED_K, 64, 4, 16, True, "indexer"),
    ("tp4-full", [150, 90], [2100, 1300], 16, 1, 32, False, "clustered"),
]


@pytest.mark.parametrize("token_warps", [0, 1], ids=["union-tile", "token-warps"])
@pytest.mark.parametrize("layout,view", [("flat", None), ("paged", "contiguous"),
                                         ("paged", PAGE_LOCAL_B)],
                         ids=["flat", "paged", "page-local"])
@pytest.mark.parametrize("spec", PATH_CASES, ids=[s[0] for s in PATH_CASES])
def test_prefill_paths(spec, layout, view, token_warps, launch_overrides):
    """Both two-consumer NVFP4 paths right against the CPU backend and the fp64 reference
    (check_result: page-local also bitwise equal to its swizzled twin), bf16 and fp16 q, global
    scales that are not powers of two, lse and temperature lse; the prefill kernel alone."""
    name_, lens_q, lens_k, hq, hkv, topk, causal, pattern = spec
    launch_overrides(token_warps=token_warps)
    for dtype in (BF16, FP16):
        options = dict(layout=layout, dtype=dtype, pattern=pattern, seed=907 + topk,
                       scales="odd", scalars=dict(lse_temperature_scale=0.6))
        if view is not None:
            options["view"] = view
        name = label("paths", name_, layout, view or "", dtype_id(dtype),
                     "token-warps" if token_warps else "union-tile")
        case = nvfp4_case(name, lens_q, lens_k, hq, hkv, topk, causal, **options)
        got, kernels = run_profiled(case)
        assert_kernel(name, kernels, "prefill_kernel")
        check_result(case, got)


@pytest.mark.parametrize("form", ["flat", PAGE_LOCAL_A])
def test_token_warps_decode_exactly(form, launch_overrides):
    """The exact-decoding probe (every E2M1 code times every finite E4M3 scale byte) through the
    prefill kernel's token warps, which the default NVFP4 prefill no longer takes."""
    launch_overrides(token_warps=1)
    test_every_e2m1_code_and_e4m3_scale_decodes_exactly("prefill", form, BF16, "unit")

