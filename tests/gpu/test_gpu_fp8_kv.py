"""fp8 E4M3 K/V on the Hopper kernels (contract sections 3 and 6): k and v are
torch.float8_e4m3fn, q is bf16 or fp16, k_global_scale / v_global_scale are the per-tensor
descales.

The classes of case that the rest of the GPU suite runs with same-dtype K/V, here with fp8 K/V,
and the fp8 cases of the CPU suite (tests/python/test_cpu_backend.py). Each result is compared
with the CPU backend and the fp64 reference within section 7 (gpu_harness.check_gpu_result, on
NaN-poisoned outputs):
- prefill: ragged requests of mixed lengths (one without query rows), MiniMax-M3 heads
  (Hq 64 / Hkv 4) and its TP 4 shape (Hq 16 / Hkv 1), group sizes 1 to 128, topk 1 to 64, causal
  or not, q_offset None / int / tensor, rows that read nothing, garbage indices, the
  one-consumer tiles; flat and paged K/V, the packed K|V halves of one cache and permuted NHD
  caches, all bitwise equal to the flat contiguous result; q and out views;
- global scales: msa_inputs' 1/64 and 1/32, 0.37 and 1.9 (not powers of two, the stored values
  requantised to keep the logical data), and none given (1.0), with lse and temperature lse;
  as one-element float32 tensors on q's device (read in place, graph replays included), and as
  CPU tensors, which are a ValueError naming the argument;
- every finite E4M3 value decoded exactly, in K and in V, through both kernels (a one-key probe);
- decode: batch 1, 16, 64 of one token and multi-token prediction (8 tokens at batch 4 and 32)
  over KV lengths up to 32768, topk 16 and 32; the one-token kernel's paths (ragged rows, split
  reductions, small-batch splits, group sizes, topk limits, page rows past 1024 pages); the
  launch overrides that change how fp8 blocks are loaded (deep pipeline, throttle, L2
  promotion), and those the launch plan leaves off for fp8 (pacing, speculative loads), which
  must change no bit;
- paged equals flat bitwise, graph replay equals eager bitwise (new inputs copied into the
  captured buffers included), two eager calls bitwise equal;
- the int32-limit probes of test_gpu_int32_limits.py (2^24-column page tables, ids near
  INT32_MAX) with their K/V stored in fp8.
"""
import math

import pytest
import torch

import flashmsa
import test_cpu_backend
import test_gpu_int32_limits as gpu_limits
import test_int32_limits as limits
from gpu_harness import (DEVICE, Case, assert_bitwise, capture_graph, check_gpu_result,
                         check_inputs_unchanged, dtype_id, garbage_indices, replay, replay_on_new_inputs,
                         run_gpu, synchronize)
from msa_inputs import FP8_K_GLOBAL_SCALE, FP8_V_GLOBAL_SCALE, build_case

pytestmark = pytest.mark.kv_quant_gpu

FP8 = torch.float8_e4m3fn
E4M3_MAX = 448.0
BF16, FP16 = torch.bfloat16, torch.float16
M3 = (64, 4)            # MiniMax-M3: Hq 64, Hkv 4
TP4 = (16, 1)           # M3 at tensor parallelism 4
# (k_global_scale, v_global_scale): msa_inputs' descales (powers of two), two that are not
# powers of two, and none given (the contract's 1.0: small values go subnormal in E4M3).
SCALES = {"desc": (FP8_K_GLOBAL_SCALE, FP8_V_GLOBAL_SCALE), "odd": (0.37, 1.9),
          "unit": (None, None)}


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

def fp8_kwargs(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal, *, dtype=BF16,
               scales="desc", seed=0, **options):
    """build_case with fp8 K/V, stored for the global scales SCALES[scales]. msa_inputs stores
    x / (1/64) and x / (1/32); other scales requantise those values in place (every page and
    view keeps its layout), so that the logical K and V stay randn / 3 and a layout's twin
    (same seed, same scales) holds the same fp8 bytes."""
    kwargs = build_case(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal,
                        q_dtype=dtype, kv_dtype="fp8", seed=seed, **options)
    if scales != "desc":
        for name, stored_with, scale in zip(("k", "v"), SCALES["desc"], SCALES[scales]):
            x = kwargs[name]
            x.copy_((x.float() * stored_with / (1.0 if scale is None else scale))
                    .clamp(-E4M3_MAX, E4M3_MAX).to(FP8))
            if scale is None:
                del kwargs[f"{name}_global_scale"]
            else:
                kwargs[f"{name}_global_scale"] = scale
    return kwargs


def fp8_case(name, seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal, *,
             scalars=None, **options):
    """A gpu_harness.Case with fp8 K/V (fp8_kwargs), scalars added to every evaluation."""
    kwargs = fp8_kwargs(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal,
                        **options)
    kwargs.update(scalars or {})
    case = Case(name, kwargs)
    for key in ("k", "v"):
        assert case.gpu[key].dtype == FP8, f"[{name}] {key} is {case.gpu[key].dtype}, not fp8"
    return case


def label(*parts, **named):
    return "-".join(["fp8"] + [str(p) for p in parts] + [f"{k}{v}" for k, v in named.items()])


def check(case, rows=None):
    """One poisoned call, checked against the CPU backend and the fp64 reference."""
    got = run_gpu(case)
    check_gpu_result(case, got, rows=rows)
    return got


def assert_same(name, what, got, want):
    for part, g, w in zip(("out", "lse", "lse_t"), got, want):
        assert_bitwise(name, f"{part}: {what}", g, w)


# ---------------------------------------------------------------------------------------------
# The CPU suite's fp8 cases (test_cpu_backend.py), on CUDA tensors
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [BF16, FP16], ids=dtype_id)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_cpu_suite_flat_and_paged(causal, dtype):
    """test_kv_dtypes_flat_and_paged with fp8 K/V: the flat call right; the paged call (pages in
    random order, noise pages) right and bitwise equal to it (contract section 6)."""
    seqlens_q, seqlens_k, hq, hkv, topk = test_cpu_backend.DTYPE_SHAPE
    base = label("cpu-suite", dtype_id(dtype), "causal" if causal else "full")
    scalars = dict(lse_temperature_scale=test_cpu_backend.TEMPERATURE)
    flat, paged = (fp8_case(f"{base}-{layout}", seqlens_q, seqlens_k, hq, hkv, topk, causal,
                            dtype=dtype, seed=11, layout=layout, scalars=scalars)
                   for layout in ("flat", "paged"))
    want = check(flat)
    got = check(paged)
    assert_same(paged.name, "paged vs flat", got, want)


@pytest.mark.parametrize("view", ["packed", "nhd"])
@pytest.mark.parametrize("layout", ["flat", "paged"])
def test_cpu_suite_views_read_in_place(layout, view):
    """test_kv_views_read_in_place with fp8 K/V: the halves of one packed K|V cache (token
    stride 2 x 128 bytes) and NHD storage permuted to HND give the contiguous result bitwise."""
    shape = ([70, 33], [900, 1300], 8, 2, 8, True)
    base = label("cpu-suite-view", layout, view)
    contiguous = fp8_case(f"{base}-contiguous", *shape, layout=layout, seed=5)
    strided = fp8_case(base, *shape, layout=layout, view=view, seed=5)
    assert not strided.gpu["k"].is_contiguous(), f"[{base}] the {view} K should be a view"
    want = run_gpu(contiguous)
    got = check(strided)
    assert_same(base, "view vs contiguous K/V", got, want)


# ---------------------------------------------------------------------------------------------
# Prefill
# ---------------------------------------------------------------------------------------------

# Ragged requests: 120 and 33 rows over 2000 and 700 keys, one with no query rows (129 keys), 700
# rows over 3100 keys.
MIXED_Q, MIXED_K = [120, 33, 0, 700], [2000, 700, 129, 3100]


@pytest.mark.parametrize("dtype", [BF16, FP16], ids=dtype_id)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("heads", [M3, TP4], ids=["m3", "tp4"])
def test_prefill_mixed_requests(heads, causal, dtype):
    """The two production head layouts; bf16 q with msa_inputs' descales, fp16 q with 0.37 and
    1.9 (so each q dtype meets both the P.V product of its own kind and a non-trivial scale)."""
    hq, hkv = heads
    scales = "desc" if dtype == BF16 else "odd"
    pattern = "indexer" if causal else "clustered"
    name = label("prefill-mixed", dtype_id(dtype), scales, pattern, hq=hq, hkv=hkv,
                 causal=causal)
    case = fp8_case(name, MIXED_Q, MIXED_K, hq, hkv, 16, causal, dtype=dtype, scales=scales,
                    pattern=pattern, seed=301 + hq + causal)
    check(case)


# (Hq, Hkv): group sizes 1, 3, 16, 64 and 128.
GROUPS = [(4, 4), (12, 4), (32, 2), (64, 1), (128, 1)]
GROUP_CASES = [(h, True) for h in GROUPS] + [((4, 4), False), ((128, 1), False)]


@pytest.mark.parametrize("heads,causal", GROUP_CASES, ids=[
    f"g{hq // hkv}-{'causal' if c else 'full'}" for (hq, hkv), c in GROUP_CASES])
def test_group_sizes(heads, causal):
    hq, hkv = heads
    name = label("group", hq=hq, hkv=hkv, causal=causal)
    case = fp8_case(name, [150, 90], [2100, 1300], hq, hkv, 16, causal, seed=311 + hq)
    check(case)


TOPK_CASES = [(1, BF16), (16, BF16), (33, FP16), (64, BF16), (64, FP16)]


@pytest.mark.parametrize("topk,dtype", TOPK_CASES,
                         ids=[f"topk{t}-{dtype_id(d)}" for t, d in TOPK_CASES])
def test_topk(topk, dtype):
    """topk 64 needs more than 64 blocks: 8300 keys are 65."""
    name = label("topk", dtype_id(dtype), topk=topk)
    case = fp8_case(name, [120, 40], [8300, 900], 16, 2, topk, True, dtype=dtype, seed=321)
    check(case)


SCALE_CASES = [("desc", "flat", BF16), ("odd", "flat", BF16), ("odd", "paged", FP16),
               ("unit", "flat", FP16), ("unit", "paged", BF16), ("desc", "paged", FP16)]


@pytest.mark.parametrize("scales,layout,dtype", SCALE_CASES,
                         ids=[f"{s}-{l}-{dtype_id(d)}" for s, l, d in SCALE_CASES])
def test_global_scales(scales, layout, dtype):
    """The descales multiply the scores and the output (section 6); "odd" also sets
    softmax_scale, "unit" passes no global scale at all."""
    name = label("scales", scales, layout, dtype_id(dtype))
    scalars = dict(softmax_scale=0.05) if scales == "odd" else {}
    case = fp8_case(name, [90, 130], [1500, 2600], 16, 2, 16, True, dtype=dtype, scales=scales,
                    layout=layout, seed=331, scalars=scalars)
    if scales == "unit":
        assert "k_global_scale" not in case.gpu and "v_global_scale" not in case.gpu, (
            f"[{name}] the unit-scale case must leave the global scales to their default")
    check(case)


GLOBAL_SCALES = ("k_global_scale", "v_global_scale")


@pytest.mark.parametrize("argument", GLOBAL_SCALES)
def test_global_scales_as_cpu_tensors(argument):
    """A global-scale tensor must be a one-element float32 tensor on q's device (sections 6 and
    8): one-element float32 CPU tensors, of shape () and (1,), with CUDA q are a ValueError
    naming the argument, whether the other descale is a float or a tensor on q's device."""
    other = next(a for a in GLOBAL_SCALES if a != argument)
    case = fp8_case(label("scales-on-cpu", argument), [90, 130], [1500, 2600], 16, 2, 16, True,
                    scales="odd", seed=332)
    for other_value in (case.gpu[other], _device_scale(case.gpu[other], ())):
        for value in (torch.tensor(case.gpu[argument]), torch.tensor([case.gpu[argument]])):
            assert value.dtype == torch.float32 and value.device.type == "cpu"
            kwargs = {**case.gpu, argument: value, other: other_value}
            with pytest.raises(ValueError) as raised:
                flashmsa.msa_sparse_attention(**kwargs, return_temperature_lse=True)
            message = str(raised.value)
            assert argument in message and other not in message, (
                f"[{case.name}] a CPU {argument} of shape {tuple(value.shape)} with CUDA q (other "
                f"descale a {type(other_value).__name__}): the ValueError must name {argument} "
                f"alone, got: {message}")
    synchronize(case.name)


def _device_scale(value, shape):
    return torch.full(shape, value, dtype=torch.float32, device=DEVICE)


@pytest.mark.parametrize("layout", ["flat", "paged"])
def test_device_resident_global_scales(layout):
    """One-element float32 tensors on q's device (section 6), of shape () and (1,): power-of-two
    values give the float form's result bitwise, others agree within section 7."""
    base = label("device-scales", layout)
    pow2 = fp8_case(f"{base}-pow2", [90, 130], [1500, 2600], 16, 2, 16, True, layout=layout,
                    seed=333)
    want = run_gpu(pow2)
    got = run_gpu(pow2, k_global_scale=_device_scale(FP8_K_GLOBAL_SCALE, ()),
                  v_global_scale=_device_scale(FP8_V_GLOBAL_SCALE, (1,)))
    assert_same(pow2.name, "device scales 1/64, 1/32 vs the same floats", got, want)
    odd = fp8_case(f"{base}-odd", [90, 130], [1500, 2600], 16, 2, 16, True, layout=layout,
                   scales="odd", seed=333)
    odd.with_gpu(k_global_scale=_device_scale(0.37, (1,)), v_global_scale=_device_scale(1.9, ()))
    check(odd)


def test_device_scales_read_at_graph_replay():
    """A decode step captured with device-resident scales replays with the values the tensors
    hold at replay time (section 6): new powers of two written after capture give the eager
    result for those values, bitwise, in both the tensor and the float form."""
    case = decode_case(16, 1, seed=334, tag="graph-device-scales")
    name = case.name
    k_scale = _device_scale(FP8_K_GLOBAL_SCALE, ())
    v_scale = _device_scale(FP8_V_GLOBAL_SCALE, (1,))
    kwargs = dict(case.gpu, k_global_scale=k_scale, v_global_scale=v_scale)
    out = torch.full_like(kwargs["q"], math.nan)

    def call():
        return flashmsa.msa_sparse_attention(**kwargs, out=out, return_temperature_lse=True)

    graph, captured = capture_graph(name, call)
    replay(name, graph, captured)
    assert_same(name, "replay vs eager with the captured scales", captured, run_gpu(case))
    k_scale.fill_(1 / 128)
    v_scale.fill_(1 / 8)
    replay(name, graph, captured)
    replayed = tuple(x.clone() for x in captured)
    case.with_gpu(k_global_scale=1 / 128, v_global_scale=1 / 8)
    want = run_gpu(case)
    assert_same(name, "replay after writing 1/128, 1/8 vs eager with those floats", replayed,
                want)
    assert_same(name, "replay vs eager with the tensors", replayed,
                run_gpu(case, k_global_scale=k_scale, v_global_scale=v_scale))
    check_gpu_result(case, replayed)


@pytest.mark.parametrize("temperature,dtype", [(0.5, BF16), (2.0, FP16)],
                         ids=["T0.5-bf16", "T2.0-fp16"])
def test_temperature_lse(temperature, dtype):
    name = label("lse_t", dtype_id(dtype), T=temperature)
    case = fp8_case(name, [100, 60], [2000, 700], 16, 4, 16, True, dtype=dtype, scales="odd",
                    seed=341, scalars=dict(lse_temperature_scale=temperature))
    check(case)


def test_lse_only():
    """return_softmax_lse alone returns (out, lse), both right."""
    name = label("lse-only")
    case = fp8_case(name, [64, 100], [1000, 1900], 8, 2, 16, True, seed=342)
    out = torch.full_like(case.gpu["q"], math.nan)
    result = flashmsa.msa_sparse_attention(**case.gpu, return_softmax_lse=True, out=out)
    synchronize(name)
    assert isinstance(result, tuple) and len(result) == 2, f"[{name}] expected (out, lse)"
    assert result[0] is out, f"[{name}] out= was not returned"
    check_gpu_result(case, (result[0], result[1], None))


Q_OFFSETS = [(0, BF16), (700, BF16), (-50, BF16), ([1200, 3], BF16), ([-200, 5000], FP16)]


@pytest.mark.parametrize("q_offset,dtype", Q_OFFSETS,
                         ids=["int0", "int700", "int-50", "tensor", "tensor_neg-fp16"])
def test_explicit_q_offset(q_offset, dtype):
    """Explicit int and per-request tensor offsets, including positions that read nothing."""
    name = label("q_offset", dtype_id(dtype), q_offset=q_offset)
    case = fp8_case(name, [180, 64], [2000, 1500], 16, 2, 16, True, dtype=dtype,
                    q_offset=q_offset, seed=351)
    check(case)


@pytest.mark.parametrize("layout", ["flat", "paged"])
def test_rows_that_read_nothing(layout):
    """Every way a row reads nothing: a request without keys, one without query rows, negative
    causal positions, an index list that starts with a negative id, only out-of-range ids.
    out exactly 0 and lse, lse_t exactly -inf there; every other row right and finite."""
    name = label("empty-rows", layout)
    case = fp8_case(name, [40, 0, 50, 60, 70], [0, 500, 900, 1300, 2000], 8, 2, 8, True,
                    q_offset=[0, 0, -30, 0, 1930], layout=layout, seed=361)
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


@pytest.mark.parametrize("layout,dtype", [("flat", BF16), ("paged", FP16)],
                         ids=["flat-bf16", "paged-fp16"])
def test_garbage_indices(layout, dtype):
    """No fault, and the contract's result, whatever the index values (section 4). Paged: the
    page table's unused entries hold garbage too."""
    name = label("garbage", layout, dtype_id(dtype))
    case = fp8_case(name, [150, 97], [1800, 1000], 16, 2, 16, True, dtype=dtype, layout=layout,
                    seed=371)
    q2k = garbage_indices(case.cpu["q2k_indices"], num_blocks_min=8,
                          generator=torch.Generator().manual_seed(371))
    changes = dict(q2k_indices=q2k.to(DEVICE))
    if layout == "paged":
        table = case.cpu["page_table"].clone()
        table[table < 0] = 2 ** 31 - 1                  # unused entries: never dereferenced
        changes["page_table"] = table.to(DEVICE)
    case.with_gpu(**changes)
    check(case)


ONE_CONSUMER = [((4, 4), 32), ((4, 4), 64), ((8, 2), 16), ((8, 2), 33)]


@pytest.mark.parametrize("heads,topk", ONE_CONSUMER,
                         ids=[f"hq{h[0]}_hkv{h[1]}-topk{t}" for h, t in ONE_CONSUMER])
def test_one_consumer_tiles(heads, topk):
    """Requests of 16 rows at group sizes 1 and 4: the prefill kernel's one-consumer shape (two
    CTAs per SM), whose tiles of up to 64 tokens hold the most planning state beside the stages
    that the converter warps rewrite in place."""
    hq, hkv = heads
    name = label("one-consumer", hq=hq, hkv=hkv, topk=topk)
    case = fp8_case(name, [16, 16, 16], [9000, 2000, 300], hq, hkv, topk, True, layout="paged",
                    seed=381 + topk)
    check(case)


# (name, q lens, k lens, Hq, Hkv, topk, causal, pattern, q dtype)
LAYOUT_CASES = [
    ("gqa2_full", [100, 37], [2048, 700], 4, 2, 16, False, "random", BF16),
    ("m3", [200, 50], [3000, 1800], 64, 4, 16, True, "clustered", BF16),
    ("m3", [200, 50], [3000, 1800], 64, 4, 16, True, "clustered", FP16),
    ("tp4_mixed", MIXED_Q, MIXED_K, 16, 1, 16, True, "indexer", BF16),
]
LAYOUTS = [("paged", "contiguous"), ("paged", "packed"), ("paged", "nhd"), ("flat", "packed"),
           ("flat", "nhd")]


@pytest.mark.parametrize("spec", LAYOUT_CASES, ids=[f"{s[0]}-{dtype_id(s[8])}"
                                                    for s in LAYOUT_CASES])
def test_layouts_equal_flat_bitwise(spec):
    """test_gpu_layouts.py with fp8 K/V: paged (permuted pages), packed K|V halves and NHD caches
    hold the flat contiguous case's fp8 bytes (same seed), so their outputs equal its bitwise;
    the flat one is checked."""
    tag, lens_q, lens_k, hq, hkv, topk, causal, pattern, dtype = spec
    base = label("layout", tag, dtype_id(dtype))

    def build(layout, view):
        return fp8_case(f"{base}-{layout}-{view}", lens_q, lens_k, hq, hkv, topk, causal,
                        dtype=dtype, pattern=pattern, seed=391, layout=layout, view=view)

    flat = build("flat", "contiguous")
    want = check(flat)
    for layout, view in LAYOUTS:
        other = build(layout, view)
        got = run_gpu(other)
        assert_same(other.name, "vs flat contiguous", got, want)
        check_inputs_unchanged(other)


def test_q_q2k_and_out_views():
    """q as a slice of a fused QKV buffer, q2k as a token-major buffer, out= a strided slice of a
    wider NaN buffer (written whole, nothing outside it), and the library-allocated output equal
    to out= bitwise."""
    name = label("q-q2k-out-views")
    case = fp8_case(name, [130, 70], [2200, 800], 16, 4, 16, True, seed=392)
    allocated, _, _ = run_gpu(case, lse=False, out=None)
    q = case.gpu["q"]
    total_q, hq, dim = q.shape
    fused = torch.randn(total_q, hq + 4, dim, device=DEVICE).div_(3).to(q.dtype)
    fused[:, :hq] = q
    token_major = case.gpu["q2k_indices"].permute(1, 0, 2).contiguous().permute(1, 0, 2)
    assert not token_major.is_contiguous(), f"[{name}] the q2k view should not be contiguous"
    wide = torch.empty((total_q, hq + 3, dim), dtype=q.dtype, device=DEVICE)
    out = wide[:, 1:hq + 1]

    def call_into_out(what, **views):
        wide.fill_(math.nan)
        case.with_gpu(**views)
        got = run_gpu(case, lse=what != "contiguous q", out=out)
        assert bool(torch.isnan(wide[:, 0]).all() and torch.isnan(wide[:, hq + 1:]).all()), (
            f"[{name}] the call with {what} wrote outside the out= view")
        return got

    plain = call_into_out("contiguous q")
    assert_bitwise(name, "out= vs allocated output", plain[0], allocated)
    got = call_into_out("q and q2k views", q=fused[:, :hq], q2k_indices=token_major)
    check_gpu_result(case, got)


# ---------------------------------------------------------------------------------------------
# Every E4M3 value decoded exactly (section 6: "each value converts exactly to fp32")
# ---------------------------------------------------------------------------------------------

def _finite_e4m3(count, shift):
    """count E4M3 values cycling through all 254 finite ones (every byte but the two NaNs, 0x7F
    and 0xFF: zeros, subnormals, +-448), rolled by shift."""
    codes = torch.arange(256)
    codes = codes[(codes & 0x7F) != 0x7F].roll(shift)
    return codes.repeat(math.ceil(count / codes.numel()))[:count].to(torch.uint8).view(FP8)


EXACT_SCALES = {"unit": (None, None), "pow2": (1 / 64, 1 / 16)}


def _exact_case(kernel, dtype, scales):
    """Query row r has q = e_(r mod 128) in every head and reads one key, so that with
    softmax_scale 1: lse[r, h] = k_global_scale * K[h's KV head, r mod 128] and out[r, h, :] =
    v_global_scale * V[h's KV head, :], both exact for power-of-two scales (the probabilities are
    1, and E4M3 values times 1/64 or 1/16 are bf16 and fp16 numbers, none subnormal). The
    4 x 128 K and V values of each key hold every finite E4M3 value twice.
    prefill: one flat request of 128 rows over one key (the prefill kernel);
    decode: 128 one-row requests of one key each (the one-token kernel), each on its own page
    (random order, noise past token 0 and in two spare pages), K/V rolled per request."""
    hq, hkv = M3
    rows, dim = 128, 128
    generator = torch.Generator().manual_seed(401)
    q = torch.zeros(rows, hq, dim, dtype=dtype)
    q[torch.arange(rows), :, torch.arange(rows) % dim] = 1
    k_scale, v_scale = EXACT_SCALES[scales]
    kwargs = dict(q=q, causal=False, softmax_scale=1.0, lse_temperature_scale=0.5)
    if k_scale is not None:
        kwargs.update(k_global_scale=k_scale, v_global_scale=v_scale)
    if kernel == "prefill":
        kwargs.update(k=_finite_e4m3(hkv * dim, 0).view(1, hkv, dim),
                      v=_finite_e4m3(hkv * dim, 77).view(1, hkv, dim),
                      q2k_indices=torch.zeros(hkv, rows, 1, dtype=torch.int32),
                      cu_seqlens_q=torch.tensor([0, rows], dtype=torch.int32),
                      cu_seqlens_k=torch.tensor([0, 1], dtype=torch.int32))
    else:
        pages = rows + 2
        noise = (torch.randn(2, pages, hkv, 128, dim, generator=generator) * 8).to(FP8)
        k, v = noise[0].clone(), noise[1].clone()
        order = torch.randperm(pages, generator=generator)[:rows]
        for b in range(rows):
            k[order[b], :, 0] = _finite_e4m3(hkv * dim, 3 * b).view(hkv, dim)
            v[order[b], :, 0] = _finite_e4m3(hkv * dim, 77 + 5 * b).view(hkv, dim)
        q2k = torch.full((hkv, rows, 16), -1, dtype=torch.int32)
        q2k[:, :, 0] = 0
        kwargs.update(k=k, v=v, q2k_indices=q2k,
                      cu_seqlens_q=torch.arange(rows + 1, dtype=torch.int32),
                      page_table=torch.stack([order, torch.full_like(order, -1)], 1).int(),
                      seqused_k=torch.ones(rows, dtype=torch.int32))
    return Case(label("exact-decoding", kernel, dtype_id(dtype), scales), kwargs)


def _read_key(case):
    """(rows, Hkv, D) K and V of the one key each row reads."""
    kw = case.cpu
    if "page_table" in kw:
        pages = kw["page_table"][:, 0].long()
        return kw["k"][pages, :, 0], kw["v"][pages, :, 0]
    rows = kw["q"].shape[0]
    return kw["k"][0].expand(rows, -1, -1), kw["v"][0].expand(rows, -1, -1)


@pytest.mark.parametrize("scales", sorted(EXACT_SCALES))
@pytest.mark.parametrize("dtype", [BF16, FP16], ids=dtype_id)
@pytest.mark.parametrize("kernel", ["prefill", "decode"])
def test_every_e4m3_value_decodes_exactly(kernel, dtype, scales):
    case = _exact_case(kernel, dtype, scales)
    name = case.name
    out, lse, lse_t = check(case)
    k_scale, v_scale = (1.0 if s is None else s for s in EXACT_SCALES[scales])
    hq, hkv = M3
    group = hq // hkv
    k_read, v_read = _read_key(case)
    rows = torch.arange(k_read.shape[0])
    heads = torch.arange(hq) // group
    # (rows, Hq): K of the row's dim in each head's KV head.
    k_value = k_read[rows[:, None], heads[None, :], (rows % 128)[:, None]].double() * k_scale
    want_out = (v_read.float()[:, heads] * v_scale).to(dtype)
    got_out = out.cpu()
    wrong = got_out != want_out
    if bool(wrong.any()):
        r, h, d = (int(i) for i in wrong.nonzero()[0])
        raise AssertionError(
            f"[{name}] {int(wrong.sum())} of {out.numel()} output values differ from the E4M3 "
            f"values of V times v_global_scale; first: row {r}, head {h}, dim {d}: "
            f"{float(got_out[r, h, d])!r}, want {float(want_out[r, h, d])!r} (V byte "
            f"0x{int(v_read[r, h // group, d].view(torch.uint8)):02x})")
    for what, got, want in (("lse", lse, k_value), ("lse_t", lse_t, 0.5 * k_value)):
        error = (got.cpu().double() - want).abs()
        bound = 1e-6 * want.abs() + 1e-7
        bad = error > bound
        if bool(bad.any()):
            r, h = (int(i) for i in bad.nonzero()[0])
            raise AssertionError(
                f"[{name}] {what} is not the one score's value at {int(bad.sum())} of "
                f"{got.numel()} entries (K decoded wrong); first: row {r}, head {h}: "
                f"{float(got[r, h])!r}, want {float(want[r, h])!r} (K byte 0x"
                f"{int(k_read[r, h // group, r % 128].view(torch.uint8)):02x})")


# ---------------------------------------------------------------------------------------------
# Decode and multi-token prediction (paged)
# ---------------------------------------------------------------------------------------------

LONGEST = 32768
# KV lengths drawn for ragged batches: empty, below one block, around block edges, long.
LENGTH_POOL = [0, 1, 7, 100, 127, 128, 129, 255, 256, 1000, 2049, 3000, 4095, 4097, 6000, 9000]


def decode_lengths(batch, seed):
    """One request of 32768 keys (256 whole pages), one of 32767 (its last page one short),
    the rest from the pool."""
    if batch == 1:
        return [LONGEST]
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(LENGTH_POOL), (batch,), generator=generator)
    lengths = [LENGTH_POOL[i] for i in picks.tolist()]
    lengths[0] = LONGEST
    if batch > 2:
        lengths[-1] = LONGEST - 1
    return lengths


def decode_case(batch, qlen, *, heads=M3, topk=16, dtype=BF16, scales="desc", seed=0,
                lengths=None, view="contiguous", scalars=None, tag="decode"):
    lengths = decode_lengths(batch, seed) if lengths is None else lengths
    hq, hkv = heads
    name = label(tag, dtype_id(dtype), scales, view, b=batch, q=qlen, hq=hq, hkv=hkv, topk=topk,
                 seed=seed)
    return fp8_case(name, [qlen] * batch, lengths, hq, hkv, topk, True, dtype=dtype,
                    scales=scales, seed=seed, layout="paged", view=view, scalars=scalars)


# (batch, query tokens per request, (Hq, Hkv), topk, q dtype, scales)
DECODE_CASES = [
    (1, 1, M3, 16, BF16, "desc"),
    (16, 1, M3, 16, BF16, "odd"),
    (16, 1, M3, 32, FP16, "desc"),
    (64, 1, M3, 16, BF16, "unit"),
    (4, 8, M3, 16, BF16, "desc"),
    (4, 8, M3, 32, FP16, "unit"),
    (32, 8, M3, 16, BF16, "odd"),
    (32, 8, TP4, 32, BF16, "desc"),
]


@pytest.mark.parametrize("spec", DECODE_CASES, ids=[
    f"b{b}-q{q}-hq{h[0]}-topk{t}-{dtype_id(d)}-{s}" for b, q, h, t, d, s in DECODE_CASES])
def test_decode(spec):
    batch, qlen, heads, topk, dtype, scales = spec
    case = decode_case(batch, qlen, heads=heads, topk=topk, dtype=dtype, scales=scales,
                       seed=411 + batch + qlen + topk)
    check(case)


ONE_TOKEN_GROUPS = [((16, 1), 1), ((8, 1), 9), ((12, 4), 1), ((12, 4), 9)]


@pytest.mark.parametrize("heads,batch", ONE_TOKEN_GROUPS,
                         ids=[f"hq{h[0]}_hkv{h[1]}-b{b}" for h, b in ONE_TOKEN_GROUPS])
def test_decode_one_token_group_sizes(heads, batch):
    """TP 4 (Hq 16 / Hkv 1), TP 8 (Hq 8 / Hkv 1) and a group of 3, one token a request: small
    batches split every tile over a cluster, and groups under 16 heads reduce rows with no head
    behind them. Temperature LSE included."""
    lengths = [LONGEST] if batch == 1 else [LONGEST, 0, 127, 129, 4097, 9000, 256, 1, 20000]
    case = decode_case(batch, 1, heads=heads, lengths=lengths, seed=421 + batch,
                       scalars=dict(lse_temperature_scale=0.7), tag="decode-one-token-group")
    check(case)


@pytest.mark.parametrize("heads,qlen", [(M3, 4), ((16, 2), 8)], ids=["m3-q4", "g8-q8"])
def test_decode_multi_round_garbage_indices(heads, qlen):
    """Tiles of more than 32 index entries (warp planning's rounds) with duplicates, a negative
    mid-list, huge and out-of-range ids, and garbage in the page table's unused entries."""
    lengths = [LONGEST, 4097, 129, 1000, 9000, 20000]
    case = decode_case(len(lengths), qlen, heads=heads, lengths=lengths, seed=431 + qlen,
                       tag="decode-garbage")
    q2k = garbage_indices(case.cpu["q2k_indices"], num_blocks_min=2,
                          generator=torch.Generator().manual_seed(qlen))
    table = case.cpu["page_table"].clone()
    table[table < 0] = 2 ** 31 - 1                      # unused entries: never dereferenced
    case.with_gpu(q2k_indices=q2k.to(DEVICE), page_table=table.to(DEVICE))
    check(case)


def test_decode_unequal_rows_with_uniform_total():
    """Requests of 0, 16, 5 and 11 rows (32 in all, as 4 x 8 would be): more tiles than the
    split count assumed, each computed once."""
    qlens, lengths = [0, 16, 5, 11], [LONGEST, 4097, 129, 9000]
    name = label("decode-unequal-rows")
    case = fp8_case(name, qlens, lengths, *M3, 16, True, layout="paged", seed=441)
    check(case)


@pytest.mark.parametrize("qlen", [2, 4])
def test_decode_deep_pipeline_override(qlen, launch_overrides):
    """test_gpu_decode.py's override case (deep_pipeline=1, 4 splits: three stages at one CTA
    per SM, split partials pushed) on fp8 pages."""
    launch_overrides(deep_pipeline=1, splits=4)
    case = decode_case(3, qlen, lengths=[127, 4097, 20000], seed=451 + qlen,
                       tag="decode-deep-pipeline")
    check(case)


# (batch, tokens, deep_pipeline) of the throttled shapes (test_gpu_decode.py): the throttle
# issues a block's loads once the previous block's bytes have landed, and fp8 lands half the
# bytes of bf16 (one 128-byte row a key), converted after landing (by the prefill kernel's
# converter warps, by the decode kernel's consumers).
THROTTLED = [("mtp-b3", 0), ("mtp-b3", 1), ("mtp-b3", 2), ("one-token-b16-deep", 2)]
THROTTLED_SHAPES = {"mtp-b3": (3, 8, 0), "one-token-b16-deep": (16, 1, 1)}


@pytest.mark.parametrize("shape,throttle", THROTTLED, ids=[f"{s}-{t}" for s, t in THROTTLED])
def test_decode_inflight_throttle(shape, throttle, launch_overrides):
    batch, qlen, deep_pipeline = THROTTLED_SHAPES[shape]
    launch_overrides(throttle=throttle, deep_pipeline=deep_pipeline)
    case = decode_case(batch, qlen, seed=461 + batch + throttle, tag=f"decode-throttle{throttle}")
    check(case)


@pytest.mark.parametrize("batch,pace", [(8, 1), (32, 9)])
def test_decode_paced_equals_unpaced(batch, pace, launch_overrides):
    """The launch plan runs fp8 K/V unpaced (the pacer would be a converter thread), so the pace
    override must change nothing: the paced call and the next one equal the unpaced call
    bitwise, and the result is right."""
    case = decode_case(batch, 8, seed=471 + batch + pace, tag=f"decode-pace{pace}")
    launch_overrides(pace=0)
    want = run_gpu(case)
    launch_overrides(pace=pace)
    for attempt in ("first", "second"):
        got = run_gpu(case)
        assert_same(case.name, f"{attempt} paced call vs unpaced", got, want)
    check_gpu_result(case, got)


@pytest.mark.parametrize("view", ["packed", "nhd"])
def test_decode_cache_views(view):
    """vLLM's packed K|V cache and an NHD cache of fp8 pages, read in place, equal the
    contiguous cache bitwise (same seed, same bytes)."""
    want = run_gpu(decode_case(8, 8, seed=481))
    case = decode_case(8, 8, seed=481, view=view)
    got = check(case)
    assert_same(case.name, "vs contiguous cache", got, want)


GRAPH_DECODE = [(3, 1, "allocator", BF16), (8, 8, "workspace", BF16), (16, 1, "workspace", FP16)]


@pytest.mark.parametrize("batch,qlen,scratch,dtype", GRAPH_DECODE,
                         ids=[f"b{b}-q{q}-{s}-{dtype_id(d)}" for b, q, s, d in GRAPH_DECODE])
def test_decode_graph_replay_with_new_inputs(batch, qlen, scratch, dtype):
    """Capture once on step A's buffers, copy step B's inputs (new q, fp8 pages, indices, page
    table and lengths; same shapes and scales) into them, replay: equal to an eager call on B
    bitwise, and right."""
    step_a = decode_case(batch, qlen, dtype=dtype, seed=491)
    lengths_b = list(reversed(decode_lengths(batch, seed=491)))
    step_b = decode_case(batch, qlen, dtype=dtype, seed=492, lengths=lengths_b)
    name = f"graph-new-inputs-{scratch}-{step_b.name}"
    workspace = flashmsa.MSASparseAttentionWorkspace(DEVICE) if scratch == "workspace" else None
    captured, eager_b = replay_on_new_inputs(name, step_a, step_b, workspace)
    assert_same(name, "replay on new inputs vs eager", captured, eager_b)
    step_b.name = name
    check_gpu_result(step_b, eager_b)


# ---------------------------------------------------------------------------------------------
# The one-token decode kernel's paths (test_gpu_one_token.py)
# ---------------------------------------------------------------------------------------------

ONE_TOKEN_LENGTHS = [LONGEST, 0, 127, 4097, 129, 9000, 256, 20000]


@pytest.mark.parametrize("layout", ["paged", "flat"])
def test_one_token_ragged_rows(layout):
    """Eight rows over eight requests of 0, 2, 1, 0, 3, 1, 0 and 1 rows: most rows are not in
    the request of their index."""
    name = label("one-token-ragged", layout)
    case = fp8_case(name, [0, 2, 1, 0, 3, 1, 0, 1], ONE_TOKEN_LENGTHS, *M3, 16, True,
                    layout=layout, seed=501)
    check(case)


def test_one_token_row_outside_requests():
    """cu_seqlens_q = 1, 2, ..., 6, 6: row 0 belongs to no request (out 0, lse -inf)."""
    batch = 6
    name = label("one-token-row-outside")
    case = fp8_case(name, [1] * batch, ONE_TOKEN_LENGTHS[:batch], *M3, 16, True,
                    layout="paged", seed=502)
    cu_seqlens_q = torch.tensor(list(range(1, batch + 1)) + [batch], dtype=torch.int32)
    case.with_gpu(cu_seqlens_q=cu_seqlens_q.to(DEVICE))
    got = run_gpu(case)
    out, lse, lse_t = got
    assert bool((out[0] == 0).all()), f"[{name}] row 0 reads nothing: out must be 0"
    assert bool(torch.isneginf(lse[0]).all() and torch.isneginf(lse_t[0]).all()), (
        f"[{name}] row 0 reads nothing: lse and lse_t must be -inf")
    # The fp64 reference would place row 0 in request 0: it evaluates rows 1.. only; the CPU
    # backend is compared on every row.
    check_gpu_result(case, got, rows=torch.arange(1, batch, device=DEVICE))


def test_one_token_pages_past_the_cached_row():
    """Requests of 140000 and 131073 keys (1094 and 1025 pages): each row's own block lies past
    a page-table row's first 1024 pages, the second one exactly at them. TP 4 heads keep the
    cache small."""
    name = label("one-token-pages-past-cached-row")
    case = fp8_case(name, [1, 1, 1], [140000, 600, 131073], *TP4, 16, True, layout="paged",
                    seed=503)
    assert case.cpu["page_table"].shape[1] > 1024, (
        f"[{name}] the page table must be wider than 1024 pages: "
        f"{tuple(case.cpu['page_table'].shape)}")
    check(case)


OFFSETS = {"non-causal": (None, False),
           "per-request": ([0, 7, -3, 40000, 129, 4096, 300, 19999], True)}


@pytest.mark.parametrize("offsets", sorted(OFFSETS))
def test_one_token_flat_offsets(offsets):
    q_offset, causal = OFFSETS[offsets]
    name = label("one-token-flat-offsets", offsets)
    case = fp8_case(name, [1] * len(ONE_TOKEN_LENGTHS), ONE_TOKEN_LENGTHS, *M3, 16, causal,
                    layout="flat", q_offset=q_offset, seed=504)
    check(case)


@pytest.mark.parametrize("topk", [1, 32, 33])
def test_one_token_topk_limits_garbage_indices(topk):
    """topk 1, 32 (the planning warp's lanes full) and 33 (past the one-token kernel), with
    garbage ids."""
    lengths = [9000, 4097, 129, 20000, 300]
    name = label("one-token-garbage", topk=topk)
    case = fp8_case(name, [1] * len(lengths), lengths, *M3, topk, True, layout="paged",
                    seed=505 + topk)
    if topk > 1:
        q2k = garbage_indices(case.cpu["q2k_indices"], num_blocks_min=2,
                              generator=torch.Generator().manual_seed(topk))
    else:  # one entry: a negative one (nothing read) or a huge one (ignored)
        q2k = case.cpu["q2k_indices"].clone()
        q2k[:, 0::3, 0] = -1
        q2k[:, 1::3, 0] = 2 ** 31 - 1
    case.with_gpu(q2k_indices=q2k.to(DEVICE))
    check(case)


@pytest.mark.parametrize("heads", [(4, 4), (68, 4)], ids=["g1", "g17"])
def test_one_token_group_size_edges_fp16(heads):
    """Group size 1, and 17 (past the one-token kernel's 16), with fp16 q."""
    name = label("one-token-group-edge", "fp16", hq=heads[0], hkv=heads[1])
    case = fp8_case(name, [1] * 5, ONE_TOKEN_LENGTHS[:5], *heads, 16, True, dtype=FP16,
                    scales="odd", layout="paged", seed=506)
    check(case)


@pytest.mark.parametrize("batch", [1, 5])
def test_one_token_flat_equals_paged(batch):
    """Same logical fp8 data (same seed) through a flat and a paged cache: bitwise equal (section
    6), at batch 1 (splits in a cluster) and 5."""
    lengths = ONE_TOKEN_LENGTHS[:batch]
    flat, paged = (fp8_case(label("one-token", layout, b=batch), [1] * batch, lengths, *M3, 16,
                            True, layout=layout, seed=507) for layout in ("flat", "paged"))
    want = run_gpu(flat)
    got = check(paged)
    assert_same(paged.name, "paged vs flat", got, want)


# (splits, deep_pipeline, cluster, push): forced through the launch overrides
REDUCTIONS = {"pull-two-per-sm": (8, 0, 1, 0), "push-one-per-sm-5": (5, 1, 1, 1),
              "workspace-merge": (3, 0, 0, 1)}


@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
def test_one_token_reduction_paths(reduction, launch_overrides):
    """Split reductions the default rule does not pick: the pull, the push at one CTA per SM
    (the deep pipeline), and splits outside a cluster merged from the workspace."""
    splits, deep_pipeline, cluster, push = REDUCTIONS[reduction]
    launch_overrides(splits=splits, deep_pipeline=deep_pipeline, cluster=cluster, push=push)
    name = label("one-token", reduction)
    case = fp8_case(name, [1] * 5, ONE_TOKEN_LENGTHS[:5], *M3, 16, True, layout="paged",
                    seed=508, scalars=dict(lse_temperature_scale=0.7))
    check(case)


@pytest.mark.parametrize("batch", [4, 8])
def test_one_token_small_batch_splits(batch):
    """Batch 4 runs 6 splits, batch 8 runs 3 (split_rules.h on 132 SMs), over ragged lengths."""
    name = label("one-token-small-batch", b=batch)
    case = fp8_case(name, [1] * batch, ONE_TOKEN_LENGTHS[:batch], *M3, 16, True, layout="paged",
                    seed=509 + batch, scalars=dict(lse_temperature_scale=0.7))
    check(case)


MULTI_ROW_LENGTHS = [30000, 4097, 129, 9000, 77, LONGEST, 256, 20000]


def check_multi_row_call(name, batch, qlen, seed, kernel):
    """batch requests of qlen rows: the call launches `kernel` (by name, through the profiler)
    and is right."""
    from torch.profiler import ProfilerActivity, profile
    case = fp8_case(name, [qlen] * batch, MULTI_ROW_LENGTHS[:batch], *M3, 16, True,
                    layout="paged", seed=seed)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        got = run_gpu(case)
    names = {event.key for event in prof.key_averages() if event.device_type.name == "CUDA"}
    assert any(kernel in launched for launched in names), (
        f"[{name}] expected {kernel}, launched {sorted(names)}")
    check_gpu_result(case, got)


@pytest.mark.parametrize("batch,qlen", [(4, 8), (5, 8), (8, 8), (6, 4)])
def test_one_token_kernel_for_multi_row_requests(batch, qlen):
    """fp8 multi-token prediction (at most 8 rows a request) takes the one-token kernel, one
    CTA a row, also past the rows x KV heads that fit the SMs (4 x 8 x 4 = 128 on 132; 5 x 8 x 4
    = 160 and 8 x 8 x 4 = 256 run two CTAs per SM)."""
    check_multi_row_call(label("multi-row", b=batch, q=qlen), batch, qlen, 511 + batch,
                         "decode_kernel")


@pytest.mark.parametrize("mode,batch", [(1, 8), (1, 4), (0, 2)])
def test_multi_row_requests_forced(mode, batch, launch_overrides):
    """decode_kernel=1 (q's dtype's routing) takes the one-token kernel only while the rows x
    KV heads fit the SMs (batch 4), the two-consumer kernel past that (batch 8); 0 keeps a
    small multi-token call on the two-consumer kernel's split launch."""
    launch_overrides(decode_kernel=mode)
    sms = torch.cuda.get_device_properties(DEVICE).multi_processor_count
    fits = batch * 8 * M3[1] <= sms
    kernel = "decode_kernel" if mode == 1 and fits else "prefill_kernel"
    check_multi_row_call(label("multi-row-forced", mode, b=batch), batch, 8, 521 + batch, kernel)


# ---------------------------------------------------------------------------------------------
# Determinism, CUDA graphs, planning and L2 overrides (test_gpu_determinism.py)
# ---------------------------------------------------------------------------------------------

# (name, q lens, k lens, Hq, Hkv, topk, causal, pattern, layout, q dtype)
DETERMINISM_CASES = [
    ("m3_ragged", [300, 1, 100, 8], [4000, 300, 2500, 9000], 64, 4, 16, True, "random", "flat",
     BF16),
    ("tp4_full", [300, 90], [2000, 1000], 16, 1, 16, False, "clustered", "paged", FP16),
]


def _determinism_case(spec, suffix):
    tag, lens_q, lens_k, hq, hkv, topk, causal, pattern, layout, dtype = spec
    return fp8_case(label(suffix, tag, layout, dtype_id(dtype)), lens_q, lens_k, hq, hkv, topk,
                    causal, dtype=dtype, pattern=pattern, layout=layout, seed=531)


@pytest.mark.parametrize("spec", DETERMINISM_CASES, ids=lambda s: s[0])
def test_two_calls_bitwise_equal(spec):
    case = _determinism_case(spec, "twice")
    first = check(case)
    second = run_gpu(case)
    assert_same(case.name, "second call vs first", second, first)


GRAPH_CASES = [(DETERMINISM_CASES[0], "allocator"), (DETERMINISM_CASES[0], "workspace"),
               (DETERMINISM_CASES[1], "workspace")]


@pytest.mark.parametrize("spec,scratch", GRAPH_CASES,
                         ids=[f"{s[0]}-{scratch}" for s, scratch in GRAPH_CASES])
def test_graph_replay_equals_eager(spec, scratch):
    case = _determinism_case(spec, f"graph-{scratch}")
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
        assert_same(case.name, f"replay {attempt} vs eager", captured, eager)
    if workspace is not None:
        assert_same(case.name, "without vs with workspace", run_gpu(case), eager)


def test_speculative_load_discarded_and_plans_agree(launch_overrides):
    """Multi-token tiles whose union is empty for request 1's rows (token 0 picks block 10,
    which it cannot see, the others block 11, past every key): the rows that bf16 K/V would
    load speculatively. The plan gives fp8 K/V no speculative load (it would land where no
    converter waits), so those rows are empty, and the speculate override, the warp's sorting
    network and the block-wide plan give the sorted warp plan's bits."""
    name = label("speculation-misses")
    case = fp8_case(name, [8, 8, 8], [3000, 1284, 640], *M3, 16, True, layout="paged", seed=541)
    q2k = case.cpu["q2k_indices"].clone()
    q2k[:, 8, :] = 10
    q2k[:, 9:16, :] = 11
    case.with_gpu(q2k_indices=q2k.to(DEVICE))
    sorted_in_warp = check(case)
    assert bool((sorted_in_warp[0][8:16] == 0).all()), f"[{name}] empty rows are not 0"
    assert bool(torch.isneginf(sorted_in_warp[1][8:16]).all()), f"[{name}] lse is not -inf"
    for override, what in ((dict(speculate=0), "without speculation"),
                           (dict(warp_plan=2), "the sorting network"),
                           (dict(warp_plan=0), "the block-wide plan")):
        launch_overrides(**override)
        assert_same(name, f"warp plan vs {what}", run_gpu(case), sorted_in_warp)


# (name, q lens, k lens, layout): one-token decode (split, ragged), flat prefill.
PROMOTION_CASES = [("m3_decode_paged", [1, 1, 1], [77, 4097, 30000], "paged"),
                   ("m3_prefill_flat", [400], [2000], "flat")]


@pytest.mark.parametrize("spec", PROMOTION_CASES, ids=lambda s: s[0])
def test_l2_promotion_changes_no_bits(spec, launch_overrides):
    """The K/V tensor maps' L2 promotion (none, 128 B, 256 B; an fp8 row of 128 dims is 128 B)
    changes how L2 fetches the boxes, never what lands in shared memory."""
    tag, lens_q, lens_k, layout = spec
    name = label("promotion", tag)
    case = fp8_case(name, lens_q, lens_k, *M3, 16, True, layout=layout, seed=551)
    default = check(case)
    for setting in (1, 2):
        launch_overrides(l2_promotion=setting)
        assert_same(name, f"L2 promotion {setting} vs none", run_gpu(case), default)


# ---------------------------------------------------------------------------------------------
# int32 limits (test_gpu_int32_limits.py) with fp8 K/V
# ---------------------------------------------------------------------------------------------

def _as_fp8(kwargs, k_scale=0.37, v_scale=0.5):
    """A case builder's bf16 K/V stored as fp8 for the given descales. V's descale is a power of
    two, so that a one-hot V (the probes) stays exactly one-hot."""
    for key, scale in (("k", k_scale), ("v", v_scale)):
        kwargs[key] = (kwargs[key].float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(FP8)
        kwargs[f"{key}_global_scale"] = scale
    return kwargs


def _fp8_limits_case(name, build):
    return Case(f"fp8-{name}", _as_fp8(build()))


PROBES = [("decode-b1-g16", 1, False, "none"), ("mtp-b8", 8, True, "tensor"),
          ("prefill-g16", 2, False, "int"), ("decode-g1", 2, False, "full")]


@pytest.mark.parametrize("spec", PROBES, ids=lambda s: f"{s[0]}-{s[3]}")
def test_near_int32_limit_probe(spec):
    """Key lengths of 2^31 - 1 .. 2^31 - 129 over 2^24-column page tables, one-hot V: which keys
    are read is checked exactly, the values against the sparse fp64 evaluation."""
    case = _fp8_limits_case(*limits.probe_case(*spec))
    gpu_limits.check_sparse_gpu_result(case, run_gpu(case), probe=True)


@pytest.mark.parametrize("spec", [("paged", "decode-g16"), ("flat", "prefill-g8")],
                         ids=lambda s: f"{s[0]}-{s[1]}")
def test_q2k_ids_near_int32_limits(spec):
    case = _fp8_limits_case(*limits.extreme_ids_case(*spec))
    gpu_limits.check_small_case(case, run_gpu(case))
