"""Gather-based PyTorch evaluation of the contract, for bf16/fp16 K/V.

For each query row and KV head it gathers the keys and values of the row's selected blocks into
a dense (topk * 128, D) tensor, then runs matmul -> masked softmax -> matmul for the G query heads
of the group at once. It is both

- baseline (c) of bench/prefill.py: what a PyTorch user would write, and
- the "plain PyTorch evaluation in q's dtype" that contract section 7's tighter bound compares
  the kernel's error with (tests/gpu), when compute_dtype is q's dtype: scores and P.V in that
  dtype, softmax in fp32, as FlashAttention-3's tests do.

Rows are processed in chunks so that the gathered K/V stay within a memory budget.
"""
from __future__ import annotations

import math

import torch

from .selection import BLOCK, select

# Gathered K plus V per chunk. 1 GiB keeps S = 131072 at a few hundred chunks on a GPU while
# leaving room for the inputs; on the CPU the same budget is simply slower.
_CHUNK_BYTES = 1 << 30


def gather_attention(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k=None, causal=False,
                     softmax_scale=None, page_table=None, seqused_k=None, k_global_scale=None,
                     v_global_scale=None, q_offset=None, lse_temperature_scale=1.0,
                     compute_dtype=None):
    """Returns (out, lse, lse_t): out (total_q, Hq, D) in compute_dtype (default: q's dtype),
    lse and lse_t float32 (total_q, Hq) (float64 when compute_dtype is). A row that reads
    nothing gets out = 0 and lse = -inf."""
    compute_dtype = compute_dtype or q.dtype
    total_q, num_qo_heads, head_dim = q.shape
    num_kv_heads, _, topk = q2k_indices.shape
    group = num_qo_heads // num_kv_heads
    paged = page_table is not None
    scale = (head_dim ** -0.5 if softmax_scale is None else softmax_scale)
    scale *= 1.0 if k_global_scale is None else k_global_scale
    v_scale = 1.0 if v_global_scale is None else v_global_scale
    seqlens_k = seqused_k if paged else cu_seqlens_k[1:] - cu_seqlens_k[:-1]
    selection = select(q2k_indices, cu_seqlens_q, seqlens_k, causal, q_offset,
                       max_pages=page_table.shape[1] if paged else None)

    keys = topk * BLOCK
    stat_dtype = torch.float64 if compute_dtype == torch.float64 else torch.float32
    out = torch.empty(total_q, num_qo_heads, head_dim, dtype=compute_dtype, device=q.device)
    lse = torch.empty(total_q, num_qo_heads, dtype=stat_dtype, device=q.device)
    lse_t = torch.empty_like(lse)
    elem = torch.finfo(compute_dtype).bits // 8
    chunk = max(1, _CHUNK_BYTES // (2 * num_kv_heads * keys * head_dim * max(elem, 2)))
    offsets = torch.arange(BLOCK, device=q.device)
    heads = torch.arange(num_kv_heads, device=q.device)[None, :, None]

    for start in range(0, total_q, chunk):
        r = slice(start, min(total_q, start + chunk))
        n = r.stop - r.start
        ids = selection.ids[:, r].permute(1, 0, 2)          # (n, Hkv, topk)
        keep = selection.keep[:, r].permute(1, 0, 2)
        request = selection.request[r]
        # Key position of every gathered slot, and whether the row reads it.
        pos = ids[..., None] * BLOCK + offsets               # (n, Hkv, topk, 128)
        visible = keep[..., None] & (pos < selection.limit[r][:, None, None, None])
        visible = visible.reshape(n, num_kv_heads, 1, keys)
        if paged:
            # Dropped slots hold id 0, whose page entry may be garbage: clamp, they are masked.
            page = page_table.long()[request[:, None, None], ids].clamp(0, k.shape[0] - 1)
            kc = _gather(k, page, heads, BLOCK).reshape(n, num_kv_heads, keys, head_dim)
            vc = _gather(v, page, heads, BLOCK).reshape(n, num_kv_heads, keys, head_dim)
        else:
            row = cu_seqlens_k.long()[request][:, None, None, None] + pos
            row = row.clamp(0, k.shape[0] - 1).reshape(n, num_kv_heads, keys)
            kc = _gather(k, row, heads, 1)
            vc = _gather(v, row, heads, 1)
        qc = q[r].reshape(n, num_kv_heads, group, head_dim).to(compute_dtype)
        s = torch.matmul(qc, kc.to(compute_dtype).transpose(-1, -2)).to(stat_dtype) * scale
        s = s.masked_fill(~visible, -math.inf)              # (n, Hkv, G, keys)
        row_lse = torch.logsumexp(s, dim=-1)
        empty = torch.isinf(row_lse)[..., None]             # all -inf: the row reads nothing
        p = torch.exp(s - row_lse[..., None]).masked_fill(empty, 0.0)
        o = torch.matmul(p.to(compute_dtype), vc.to(compute_dtype))
        if v_scale != 1.0:
            o = (o.to(stat_dtype) * v_scale).to(compute_dtype)
        out[r] = o.reshape(n, num_qo_heads, head_dim)
        lse[r] = row_lse.reshape(n, num_qo_heads)
        lse_t[r] = torch.logsumexp(s * lse_temperature_scale, dim=-1).reshape(
            n, num_qo_heads)
    return out, lse, lse_t


def _gather(x, first, heads, rows_per_entry):
    """x[first, heads] for x (N, Hkv, [128,] D): contiguous x through one index_select of whole
    (head, page) or (token, head) rows, which moves data at copy speed; any other strides (packed
    or permuted caches) through advanced indexing."""
    if not x.is_contiguous():
        return x[first, heads]
    num_kv_heads = x.shape[1]
    flat = (first * num_kv_heads + heads).reshape(-1)
    rows = x.view(-1, rows_per_entry * x.shape[-1]).index_select(0, flat)
    return rows.view(*first.shape, *x.shape[2:])
