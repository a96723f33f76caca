"""Baselines of the prefill and decode benchmarks: dense SDPA of equal work and FlexAttention.

Each builder does its set-up (inputs, block masks, compilation) outside the timed region and
returns the callables to time, one per rotation set. The gather-based baseline is
bench/gather_attention.py.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .common import HEAD_DIM, randn
from .selection import BLOCK, Selection

SDPA_BACKENDS = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
                 "sdpa_flash": SDPBackend.FLASH_ATTENTION}


def sdpa_equal_work(impl: str, seqlen_q: int, keys: int, num_qo_heads: int, num_kv_heads: int,
                    device: str, n_sets: int, batch: int = 1):
    """Dense non-causal attention of S queries against `keys` keys (2048 = topk 16 blocks), so
    every query does the work of an MSA query; `batch` such sequences (decode: one per request).
    Returns (fns, dense_flops, note).

    GQA through enable_gqa where the backend takes it; otherwise K/V are repeated to Hq heads
    before timing (the repeat is not timed).
    """
    sets = []
    for _ in range(n_sets):
        q = randn((batch, num_qo_heads, seqlen_q, HEAD_DIM), torch.bfloat16, device)
        k = randn((batch, num_kv_heads, keys, HEAD_DIM), torch.bfloat16, device)
        v = randn((batch, num_kv_heads, keys, HEAD_DIM), torch.bfloat16, device)
        sets.append((q, k, v))
    backends = [SDPA_BACKENDS[impl]] if device == "cuda" else [SDPBackend.MATH]
    note = "enable_gqa"

    def call(q, k, v, gqa):
        with sdpa_kernel(backends):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

    try:
        call(*sets[0], True)
        gqa = True
    except RuntimeError:
        group = num_qo_heads // num_kv_heads
        sets = [(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1))
                for q, k, v in sets]
        call(*sets[0], False)   # raises if the backend cannot run this shape at all
        gqa, note = False, "K/V repeated to Hq (no enable_gqa)"
    fns = [lambda s=s: call(*s, gqa) for s in sets]
    return fns, 4 * HEAD_DIM * batch * seqlen_q * num_qo_heads * keys, note


_compiled_flex = None


def _flex():
    """flex_attention, compiled once; eager on the CPU (the tiny mode checks code paths only)."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention
    if _compiled_flex is None:
        import torch._dynamo
        # One compilation per shape and mask; the default limit (8) would silently drop to the
        # eager path, which materialises the S x S scores.
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, 64)
        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex


def flex_block_mask(sel: Selection, seqlen_q: int, seqlen_k: int, num_qo_heads: int,
                    q_offset: int):
    """BlockMask over 128 x 128 tiles from a one-request selection.

    The block structure is, per (KV head, 128-token query block), the union of the selected
    blocks of its tokens; the mask_mod then checks per-token membership in a dense
    (Hkv, S_q padded, kv blocks) table, and causality against q_offset.
    """
    from torch.nn.attention.flex_attention import BlockMask

    num_kv_heads = sel.ids.shape[0]
    group = num_qo_heads // num_kv_heads
    device = sel.ids.device
    q_blocks, kv_blocks = math.ceil(seqlen_q / BLOCK), math.ceil(seqlen_k / BLOCK)
    member = torch.zeros(num_kv_heads, q_blocks * BLOCK, kv_blocks, dtype=torch.bool,
                         device=device)
    h, t, slot = sel.keep.nonzero(as_tuple=True)
    member[h, t, sel.ids[h, t, slot]] = True
    union = member.view(num_kv_heads, q_blocks, BLOCK, kv_blocks).any(dim=2)
    num = union.sum(-1).to(torch.int32)
    # Selected blocks first, in increasing order: a stable sort of the negated flags.
    order = torch.sort((~union).to(torch.int8), dim=-1, stable=True).indices.to(torch.int32)
    num = num.repeat_interleave(group, 0)[None].contiguous()
    order = order.repeat_interleave(group, 0)[None].contiguous()

    def mask_mod(b, head, q_idx, kv_idx):
        return member[head // group, q_idx, kv_idx // BLOCK] & (kv_idx <= q_idx + q_offset)

    return BlockMask.from_kv_blocks(num, order, BLOCK_SIZE=BLOCK, mask_mod=mask_mod,
                                    seq_lengths=(seqlen_q, seqlen_k))


def flex_calls(sets, block_mask, device: str):
    """One callable per input set (q (total_q, Hq, D), k/v (total_k, Hkv, D), one request)."""
    flex = _flex() if device == "cuda" else None
    if flex is None:
        from torch.nn.attention.flex_attention import flex_attention as flex
    # (1, heads, tokens, D) copies made before timing: FlexAttention's layout, not ours.
    prepared = [tuple(x.permute(1, 0, 2).unsqueeze(0).contiguous() for x in (s.q, s.k, s.v))
                for s in sets]
    return [lambda p=p: flex(*p, block_mask=block_mask, enable_gqa=True) for p in prepared]
