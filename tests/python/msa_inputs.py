"""Inputs of one MSA test case, in every storage format and layout the contract allows.

build_case(...) returns the keyword arguments of flashmsa.msa_sparse_attention (which are also
those of torch_reference.reference_msa) for fresh randn / 3 data seeded per case. The same seed
gives the same logical keys and values whatever the layout or view, so that a paged call and a
flat call, or a packed K|V view and a contiguous K/V, can be compared bitwise.
"""
import math

import torch

from flashmsa.patterns import make_q2k
from flashmsa.quantize import quantize_fp8, quantize_nvfp4, quantize_nvfp4_blocks

BLOCK_SIZE = 128
HEAD_DIM = 128
SPARE_PAGES = 3  # pages no request owns, filled with noise: reading them is a bug

FP8_K_GLOBAL_SCALE = 1 / 64  # descales exercised on every fp8 case
FP8_V_GLOBAL_SCALE = 1 / 32

# Views of paged NVFP4 K/V with page-local scales (contract section 6), as vLLM lays out a page.
NVFP4_PAGE_LOCAL_VIEWS = ("nvfp4_pages", "nvfp4_head_slots")
NVFP4_PIECE_PADDING = 16  # bytes after each piece of a page and after each page, never read


def _store(x, kv_dtype, paged, global_scale=None):
    """Logical float K or V -> (stored tensor, block scales or None)."""
    if kv_dtype == "nvfp4":
        return quantize_nvfp4(x, paged=paged)
    if kv_dtype == "fp8":
        stored, _ = quantize_fp8(x, global_scale)
        return stored, None
    return x.to(kv_dtype), None


def _place(stored_k, stored_v, view):
    """Lay K and V out as the view asks, reading the same values.

    contiguous: two contiguous tensors; packed: the two halves of one (..., 2 * Dstore) cache
    (vLLM's layout); nhd: token-major storage permuted to the head-major logical shape (a paged
    NHD cache permuted to (num_pages, Hkv, 128, D), or a head-major flat buffer for flat K/V).
    """
    if view == "contiguous":
        return stored_k.contiguous(), stored_v.contiguous()
    width = stored_k.shape[-1]
    if view == "packed":
        cache = torch.empty(*stored_k.shape[:-1], 2 * width, dtype=stored_k.dtype)
        cache[..., :width] = stored_k
        cache[..., width:] = stored_v
        return cache[..., :width], cache[..., width:]
    if view == "nhd":
        swapped = (0, 2, 1, 3) if stored_k.dim() == 4 else (1, 0, 2)
        placed = []
        for stored in (stored_k, stored_v):
            storage = stored.permute(*swapped).contiguous()
            placed.append(storage.permute(*swapped))
        return tuple(placed)
    raise ValueError(f"unknown K/V view {view!r}")


def _place_nvfp4_page_local(k_pages, v_pages, view):
    """Logical paged K/V (num_pages, Hkv, 128, D) -> NVFP4 (k, v, k_scale, v_scale), 4-D views
    into one uint8 allocation of pages (contract section 6, page-local scales).

    view "nvfp4_pages": a page is [K data | K scales | V data | V scales], each piece the planes
    of all KV heads back to back; "nvfp4_head_slots": a page is one slot per KV head, each
    [K data | K scales | V data | V scales]. Every piece and every page is followed by padding
    of 0x7F bytes (NaN as a scale), so that no stride is the packed one and reading padding
    shows. K scales are linear, V scales in token-quad order within their plane.
    """
    k_packed, k_scales = quantize_nvfp4_blocks(k_pages)
    v_packed, v_scales = quantize_nvfp4_blocks(v_pages)
    num_pages, num_kv_heads = k_packed.shape[:2]
    # V's plane: byte (t // 4) * 4 * C + s * 4 + t % 4 holds the scale of (token t, group s).
    v_quads = v_scales.reshape(num_pages, num_kv_heads, BLOCK_SIZE // 4, 4, -1).transpose(-1, -2)
    pieces = [(k_packed, k_packed.shape[-1]), (k_scales, k_scales.shape[-1]),
              (v_packed, v_packed.shape[-1]), (v_quads, v_scales.shape[-1])]
    plane_bytes = [BLOCK_SIZE * width for _, width in pieces]  # one (page, head) plane each
    padding = NVFP4_PIECE_PADDING
    if view == "nvfp4_pages":  # piece after piece, each the planes of every head
        piece_bytes = [num_kv_heads * size for size in plane_bytes]
        head_strides = plane_bytes
        page_stride = sum(size + padding for size in piece_bytes) + padding
    elif view == "nvfp4_head_slots":  # slot after slot, each one head's plane of every piece
        piece_bytes = plane_bytes
        slot_bytes = sum(size + padding for size in plane_bytes)
        head_strides = [slot_bytes] * len(pieces)
        page_stride = num_kv_heads * slot_bytes + padding
    else:
        raise ValueError(f"unknown page-local NVFP4 view {view!r}")
    offsets = [sum(size + padding for size in piece_bytes[:i]) for i in range(len(pieces))]
    cache = torch.full((num_pages * page_stride,), 0x7F, dtype=torch.uint8)
    views = []
    for (piece, width), offset, head_stride in zip(pieces, offsets, head_strides):
        placed = cache.as_strided((num_pages, num_kv_heads, BLOCK_SIZE, width),
                                  (page_stride, head_stride, width, 1), offset)
        placed.copy_(piece.reshape(placed.shape))
        views.append(placed)
    k, k_scale, v, v_scale = views
    return k, v, k_scale, v_scale


def build_case(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal, *,
               q_dtype=torch.bfloat16, kv_dtype=None, layout="flat", view="contiguous",
               pattern="random", q_offset=None, seed=0, page_order="random"):
    """Keyword arguments of msa_sparse_attention for one case.

    kv_dtype: None (q's dtype), "fp8" or "nvfp4". layout: "flat" or "paged" (pages in random
    order, or in request order with page_order="in_order", plus spare noise pages and -1 past
    each request's pages in the page table). view: how K/V sit in memory (_place), or for paged
    NVFP4 one of NVFP4_PAGE_LOCAL_VIEWS (page-local scales). q_offset: None, an int or a list
    (given to the call as an int32 tensor).
    """
    generator = torch.Generator().manual_seed(seed)
    batch_size = len(seqlens_q)
    total_q, total_k = sum(seqlens_q), sum(seqlens_k)

    def randn(*shape):
        return torch.randn(*shape, generator=generator) / 3

    q = randn(total_q, num_qo_heads, HEAD_DIM).to(q_dtype)
    keys = randn(total_k, num_kv_heads, HEAD_DIM)
    values = randn(total_k, num_kv_heads, HEAD_DIM)
    storage_dtype = q_dtype if kv_dtype is None else kv_dtype
    cu_seqlens_q = torch.tensor([0] + list(_prefix_sums(seqlens_q)), dtype=torch.int32)
    cu_seqlens_k = torch.tensor([0] + list(_prefix_sums(seqlens_k)), dtype=torch.int32)

    kwargs = dict(q=q, cu_seqlens_q=cu_seqlens_q, causal=causal)
    if isinstance(q_offset, (list, tuple)):
        kwargs["q_offset"] = torch.tensor(q_offset, dtype=torch.int32)
    elif q_offset is not None:
        kwargs["q_offset"] = q_offset
    offsets_for_pattern = list(q_offset) if isinstance(q_offset, (list, tuple)) else q_offset
    kwargs["q2k_indices"] = make_q2k(pattern, seqlens_q, seqlens_k, num_kv_heads, topk,
                                     causal=causal, q_offsets=offsets_for_pattern, seed=seed)
    if kv_dtype == "fp8":
        kwargs["k_global_scale"] = FP8_K_GLOBAL_SCALE
        kwargs["v_global_scale"] = FP8_V_GLOBAL_SCALE

    if layout == "flat":
        k_logical, v_logical = keys, values
        kwargs["cu_seqlens_k"] = cu_seqlens_k
    elif layout == "paged":
        k_logical, v_logical, page_table = _paginate(keys, values, seqlens_k, generator,
                                                     shuffle=page_order == "random")
        kwargs["page_table"] = page_table
        kwargs["seqused_k"] = torch.tensor(seqlens_k, dtype=torch.int32)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    paged = layout == "paged"
    if view in NVFP4_PAGE_LOCAL_VIEWS:
        if kv_dtype != "nvfp4" or not paged:
            raise ValueError(f"view {view!r} is for paged NVFP4 K/V")
        kwargs["k"], kwargs["v"], kwargs["k_scale"], kwargs["v_scale"] = (
            _place_nvfp4_page_local(k_logical, v_logical, view))
        return kwargs
    stored_k, k_scale = _store(k_logical, storage_dtype, paged, FP8_K_GLOBAL_SCALE)
    stored_v, v_scale = _store(v_logical, storage_dtype, paged, FP8_V_GLOBAL_SCALE)
    kwargs["k"], kwargs["v"] = _place(stored_k, stored_v, view)
    if k_scale is not None:
        kwargs["k_scale"], kwargs["v_scale"] = k_scale, v_scale
    return kwargs


def _prefix_sums(lengths):
    total = 0
    for length in lengths:
        total += length
        yield total


def _paginate(keys, values, seqlens_k, generator, shuffle=True):
    """Flat (total_k, Hkv, D) -> paged (num_pages, Hkv, 128, D) in a random page order, or in
    request order (request 0's blocks on pages 0, 1, ..., then request 1's) without shuffle."""
    pages_per_request = [math.ceil(length / BLOCK_SIZE) for length in seqlens_k]
    num_pages = sum(pages_per_request) + SPARE_PAGES
    num_kv_heads = keys.shape[1]
    # Noise everywhere first: tails of last pages and spare pages must never be read.
    k_pages = torch.randn(num_pages, num_kv_heads, BLOCK_SIZE, HEAD_DIM, generator=generator) / 3
    v_pages = torch.randn(num_pages, num_kv_heads, BLOCK_SIZE, HEAD_DIM, generator=generator) / 3
    order = torch.randperm(num_pages, generator=generator) if shuffle else torch.arange(num_pages)
    max_pages = max(pages_per_request) + 1  # one unused column of -1 in every row
    page_table = torch.full((len(seqlens_k), max_pages), -1, dtype=torch.int32)
    next_page, start = 0, 0
    for request, length in enumerate(seqlens_k):
        for block in range(pages_per_request[request]):
            page = int(order[next_page])
            next_page += 1
            page_table[request, block] = page
            rows = slice(start + block * BLOCK_SIZE, start + min(length, (block + 1) * BLOCK_SIZE))
            count = rows.stop - rows.start
            k_pages[page, :, :count] = keys[rows].transpose(0, 1)
            v_pages[page, :, :count] = values[rows].transpose(0, 1)
        start += length
    return k_pages, v_pages, page_table


def reference_kwargs(kwargs):
    """The subset of the call's keyword arguments that reference_msa takes."""
    names = ("q", "k", "v", "q2k_indices", "cu_seqlens_q", "cu_seqlens_k", "causal",
             "softmax_scale", "page_table", "seqused_k", "k_scale", "v_scale", "k_global_scale",
             "v_global_scale", "q_offset", "lse_temperature_scale")
    return {name: kwargs[name] for name in names if name in kwargs}
