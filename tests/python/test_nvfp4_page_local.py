"""Page-local NVFP4 scales (contract section 6): paged NVFP4 K/V whose E4M3 block scales live
in each page next to its data, as vLLM lays out an NVFP4 page, given as 4-D views
(num_pages, Hkv, 128, D // 16) into one allocation (msa_inputs.NVFP4_PAGE_LOCAL_VIEWS).

The CPU backend is checked against K/V dequantized here from the page bytes by the contract's
rules (K scales linear, V scales in token-quad order) and attended by the independent reference,
and bitwise against the same data with the scales in the swizzled 2-D form and against the flat
call on the same logical data."""
import math
import zlib

import pytest
import torch

import flashmsa
from msa_inputs import HEAD_DIM, NVFP4_PAGE_LOCAL_VIEWS, build_case, reference_kwargs
from torch_reference import check_close, reference_msa

BLOCK_SIZE = 128
SCALES_PER_ROW = HEAD_DIM // 16
TEMPERATURE = 0.7
GLOBAL_SCALES = dict(k_global_scale=0.75, v_global_scale=1.25)

# E2M1 values by code: bit 3 is the sign (contract section 6).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize_page_local(packed, scale, token_quad_order):
    """The contract's rule read literally: packed (num_pages, Hkv, 128, D/2) uint8, low nibble
    the even element; the scale of (page p, head h, token t, group s) is scale[p, h, t, s] (K)
    or byte (t // 4) * 4 * (D/16) + s * 4 + t % 4 of the (p, h) plane (V). -> float32."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32)
    values = torch.stack((table[(packed & 0xF).long()], table[(packed >> 4).long()]),
                         dim=-1).flatten(-2)
    scale_bytes = scale.view(torch.uint8)
    if token_quad_order:
        num_pages, num_kv_heads = scale_bytes.shape[:2]
        plane = scale_bytes.reshape(num_pages, num_kv_heads, BLOCK_SIZE * SCALES_PER_ROW)
        token = torch.arange(BLOCK_SIZE).view(-1, 1)
        group = torch.arange(SCALES_PER_ROW).view(1, -1)
        scale_bytes = plane[:, :, (token // 4) * 4 * SCALES_PER_ROW + group * 4 + token % 4]
    scales = scale_bytes.contiguous().view(torch.float8_e4m3fn).float()
    return values * scales.repeat_interleave(16, dim=-1)


def run(kwargs):
    return flashmsa.msa_sparse_attention(**kwargs, **GLOBAL_SCALES, return_temperature_lse=True,
                                         lse_temperature_scale=TEMPERATURE)


def assert_bitwise_equal(got, want, case):
    for name, a, b in zip(("out", "lse", "lse_t"), got, want):
        assert torch.equal(a, b), f"[{case}] {name} differs bitwise"


# (name, q lens, k lens, topk): topk 64 over 65 blocks.
SHAPES = [
    ("topk1", [30, 17], [300, 700], 1),
    ("topk16", [40, 25], [1000, 2100], 16),
    ("topk64", [24], [8300], 64),
]
GROUPS = {"group1": (2, 2), "group16": (32, 2)}  # (Hq, Hkv)
# How the page is laid out, with the scale dtype and q dtype each layout is run with.
PAGE_LAYOUTS = {
    "nvfp4_pages": (torch.uint8, torch.bfloat16),
    "nvfp4_head_slots": (torch.float8_e4m3fn, torch.float16),
}
assert set(PAGE_LAYOUTS) == set(NVFP4_PAGE_LOCAL_VIEWS)


@pytest.mark.parametrize("page_order", ["in_order", "random"])
@pytest.mark.parametrize("view", list(PAGE_LAYOUTS))
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("group", list(GROUPS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape[0])
def test_page_local_scales(shape, group, causal, view, page_order):
    shape_name, seqlens_q, seqlens_k, topk = shape
    num_qo_heads, num_kv_heads = GROUPS[group]
    scale_dtype, q_dtype = PAGE_LAYOUTS[view]
    case = (f"{shape_name} {group} {'causal' if causal else 'full'} {view} "
            f"{str(scale_dtype).replace('torch.', '')} scales, {page_order} pages")
    options = dict(q_dtype=q_dtype, kv_dtype="nvfp4", seed=zlib.crc32(case.encode()) % 10_000)
    arguments = (seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal)
    page_local = build_case(*arguments, layout="paged", view=view, page_order=page_order,
                            **options)
    page_local["k_scale"] = page_local["k_scale"].view(scale_dtype)
    page_local["v_scale"] = page_local["v_scale"].view(scale_dtype)
    assert page_local["k_scale"].dim() == 4 and not page_local["k"].is_contiguous(), (
        f"[{case}] the case must give 4-D scales and K as a view into the pages")
    got = run(page_local)

    # The independent evaluation: dequantize the page bytes here, attend with the reference.
    reference = reference_kwargs(page_local)
    reference.pop("k_scale")
    reference.pop("v_scale")
    reference["k"] = dequantize_page_local(page_local["k"], page_local["k_scale"], False)
    reference["v"] = dequantize_page_local(page_local["v"], page_local["v_scale"], True)
    ref_out, ref_lse, ref_lse_t = reference_msa(**reference, **GLOBAL_SCALES,
                                                lse_temperature_scale=TEMPERATURE)
    check_close(got[0], ref_out, q_dtype, lse=got[1], ref_lse=ref_lse, lse_t=got[2],
                ref_lse_t=ref_lse_t, case=case)

    # The same pages with the scales in the swizzled form, given 2-D: bitwise the same.
    swizzled = build_case(*arguments, layout="paged", page_order=page_order, **options)
    assert torch.equal(swizzled["page_table"], page_local["page_table"]), (
        f"[{case}] both forms must hold the same pages")
    swizzled["k_scale"] = swizzled["k_scale"].view(-1, SCALES_PER_ROW)
    swizzled["v_scale"] = swizzled["v_scale"].view(-1, SCALES_PER_ROW)
    assert_bitwise_equal(got, run(swizzled), case + ": page-local vs swizzled 2-D scales")

    # A paged call and a flat call on the same logical data agree bitwise (section 6).
    flat = build_case(*arguments, layout="flat", **options)
    assert_bitwise_equal(got, run(flat), case + ": page-local paged vs flat")


# --- ValueError: forms the path does not allow, shapes, strides --------------------------------

@pytest.fixture(scope="module")
def paged():
    return build_case([30, 20], [600, 400], 4, 2, 8, True, kv_dtype="nvfp4", layout="paged",
                      view="nvfp4_pages", seed=5)


@pytest.fixture(scope="module")
def swizzled_paged():
    return build_case([30, 20], [600, 400], 4, 2, 8, True, kv_dtype="nvfp4", layout="paged",
                      seed=5)


@pytest.fixture(scope="module")
def flat():
    return build_case([30, 20], [600, 400], 4, 2, 8, True, kv_dtype="nvfp4", seed=5)


def expect_value_error(names, kwargs, case, **changes):
    """The call with `changes` raises ValueError naming every one of `names`, before writing
    out=."""
    out = torch.full(kwargs["q"].shape, math.nan, dtype=kwargs["q"].dtype)
    with pytest.raises(ValueError) as caught:
        flashmsa.msa_sparse_attention(**dict(kwargs, **changes), out=out)
    message = str(caught.value)
    for name in names:
        assert name in message, f"[{case}] message {message!r} does not name {name!r}"
    assert bool(torch.isnan(out).all()), f"[{case}] out was written before the error"


def strided_bytes(shape, strides):
    """A uint8 view of `shape` with `strides` into a fresh zeroed buffer."""
    extent = 1 + sum((size - 1) * stride for size, stride in zip(shape, strides))
    return torch.zeros(extent, dtype=torch.uint8).as_strided(shape, strides)


def test_page_local_scales_with_flat_kv(flat, paged):
    expect_value_error(["k_scale", "paged"], flat, "4-D scales, flat K/V",
                       k_scale=paged["k_scale"], v_scale=paged["v_scale"])


def test_both_scales_take_the_same_form(paged, swizzled_paged):
    expect_value_error(["v_scale", "k_scale", "form"], paged, "4-D k_scale, swizzled v_scale",
                       v_scale=swizzled_paged["v_scale"])
    expect_value_error(["v_scale", "k_scale", "form"], paged, "swizzled k_scale, 4-D v_scale",
                       k_scale=swizzled_paged["k_scale"])


def test_scale_rank_is_1_2_or_4(paged):
    expect_value_error(["k_scale", "4-D"], paged, "3-D k_scale", k_scale=paged["k_scale"][0])


def test_scale_shape(paged):
    expect_value_error(["k_scale", "num_pages"], paged, "k_scale with one page too few",
                       k_scale=paged["k_scale"][:-1])
    expect_value_error(["v_scale", "head_dim // 16"], paged, "v_scale with 4 groups a row",
                       v_scale=paged["v_scale"][..., :4])
    expect_value_error(["v_scale"], paged, "v_scale with one KV head",
                       v_scale=paged["v_scale"][:, :1])


def test_scale_dtype_and_device(paged):
    expect_value_error(["k_scale", "uint8"], paged, "float32 k_scale",
                       k_scale=paged["k_scale"].float())
    expect_value_error(["v_scale", "device"], paged, "v_scale on the meta device",
                       v_scale=paged["v_scale"].to("meta"))


def test_scale_plane_must_be_contiguous(paged):
    num_pages, num_kv_heads = paged["k"].shape[:2]
    shape = (num_pages, num_kv_heads, BLOCK_SIZE, SCALES_PER_ROW)
    token_stride_16 = strided_bytes(shape, (num_kv_heads * 2048, 2048, 16, 1))
    expect_value_error(["k_scale", "contiguous"], paged, "k_scale token stride 16",
                       k_scale=token_stride_16)
    transposed = strided_bytes(shape, (num_kv_heads * 1024, 1024, 1, BLOCK_SIZE))
    expect_value_error(["v_scale", "contiguous"], paged, "v_scale transposed plane",
                       v_scale=transposed)


def test_scale_page_and_head_strides_are_multiples_of_16_bytes(paged):
    num_pages, num_kv_heads = paged["k"].shape[:2]
    shape = (num_pages, num_kv_heads, BLOCK_SIZE, SCALES_PER_ROW)
    odd_page_stride = strided_bytes(shape, (num_kv_heads * 1024 + 8, 1024, SCALES_PER_ROW, 1))
    expect_value_error(["v_scale", "16 bytes"], paged, "v_scale page stride 16n + 8",
                       v_scale=odd_page_stride)
    odd_head_stride = strided_bytes(shape, (num_kv_heads * 1032, 1032, SCALES_PER_ROW, 1))
    expect_value_error(["k_scale", "16 bytes"], paged, "k_scale head stride 1032",
                       k_scale=odd_head_stride)


def test_kv_strides_with_page_local_scales(paged):
    num_pages, num_kv_heads = paged["k"].shape[:2]
    shape = (num_pages, num_kv_heads, BLOCK_SIZE, HEAD_DIM // 2)
    # K and V as the halves of a K|V cache: token stride D, not D / 2.
    cache = torch.zeros(*shape[:3], HEAD_DIM, dtype=torch.uint8)
    expect_value_error(["k", "token stride"], paged, "K|V halves, token stride 128",
                       k=cache[..., :HEAD_DIM // 2], v=cache[..., HEAD_DIM // 2:])
    odd_head_stride = strided_bytes(shape, (num_kv_heads * 8200, 8200, HEAD_DIM // 2, 1))
    expect_value_error(["v", "16 bytes"], paged, "v head stride 8200", k=paged["k"],
                       v=odd_head_stride)
