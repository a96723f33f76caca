"""What a q2k index tensor selects, computed with plain torch ops on the tensor's own device.

The contract's section 4 turns each row q2k[h, t, :] into a *set* of blocks (first negative
entry ends the list, ids past the request's last block are ignored, duplicates count once).
The benchmarks' KV bytes, union sizes, FlexAttention block masks and the gather baseline start
from that set, so it is computed here once, vectorised, with no host loop over tokens (useful
FLOPs come from flashmsa.reference.keys_read, as in `python -m flashmsa bench`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 128  # tokens per selectable key block (contract section 1)


@dataclass
class Selection:
    """The canonical selected sets of every (KV head, query row).

    ids:   (Hkv, total_q, topk) int64, sorted per row; entries where keep is False hold 0 so
           they can be used as gather indices without any bounds risk.
    keep:  (Hkv, total_q, topk) bool, True exactly once per distinct selected block.
    limit: (total_q,) int64, one past the last key the row may read: seqlen_k, or
           min(seqlen_k, pos + 1) when causal (<= 0 when the row reads nothing).
    request: (total_q,) int64, the request each query row belongs to.
    """

    ids: torch.Tensor
    keep: torch.Tensor
    limit: torch.Tensor
    request: torch.Tensor


def request_of_rows(cu_seqlens_q: torch.Tensor, total_q: int) -> torch.Tensor:
    """(total_q,) int64 request index of each query row (empty requests are skipped)."""
    rows = torch.arange(total_q, device=cu_seqlens_q.device)
    return torch.searchsorted(cu_seqlens_q[1:].long(), rows, right=True)


def select(q2k: torch.Tensor, cu_seqlens_q: torch.Tensor, seqlens_k: torch.Tensor,
           causal: bool, q_offset=None, max_pages: int | None = None) -> Selection:
    """Canonical selection (contract sections 4 and 5).

    seqlens_k: (B,) key length of each request. q_offset: None (end-aligned), an int, or a (B,)
    tensor. max_pages: page_table.shape[1] on the paged path (ids at or past it are ignored).
    """
    num_kv_heads, total_q, topk = q2k.shape
    device = q2k.device
    cu_q = cu_seqlens_q.to(device=device, dtype=torch.int64)
    seqlens_k = seqlens_k.to(device=device, dtype=torch.int64)
    request = request_of_rows(cu_q, total_q)
    local = torch.arange(total_q, device=device) - cu_q[request]
    seqlen_k_row = seqlens_k[request]

    nblocks = (seqlen_k_row + BLOCK - 1) // BLOCK
    if max_pages is not None:
        nblocks = nblocks.clamp(max=max_pages)
    if causal:
        if q_offset is None:
            offset = seqlens_k - (cu_q[1:] - cu_q[:-1])
        elif isinstance(q_offset, int):
            offset = torch.full_like(seqlens_k, q_offset)
        else:
            offset = q_offset.to(device=device, dtype=torch.int64)
        limit = torch.minimum(seqlen_k_row, offset[request] + local + 1)
    else:
        limit = seqlen_k_row

    ids = q2k.to(torch.int64)
    # Rule 1: everything from the first negative entry on is ignored.
    alive = torch.cumsum((ids < 0).to(torch.int32), dim=-1) == 0
    # Rule 2: ids past the request's blocks (or the page table) select nothing.
    alive &= ids < nblocks[None, :, None]
    # Rule 3: a set. Sort with dead entries pushed to the end, keep the first of equal runs.
    sentinel = torch.iinfo(torch.int64).max
    ids, order = torch.sort(torch.where(alive, ids, torch.full_like(ids, sentinel)), dim=-1)
    alive = torch.gather(alive, -1, order)
    first = torch.ones_like(alive)
    first[..., 1:] = ids[..., 1:] != ids[..., :-1]
    keep = alive & first
    ids = torch.where(keep, ids, torch.zeros_like(ids))
    return Selection(ids=ids, keep=keep, limit=limit, request=request)


def distinct_blocks(group_of_row: torch.Tensor, sel: Selection, num_groups: int) -> torch.Tensor:
    """(Hkv, num_groups) int64: distinct kept blocks of each KV head over the rows of a group.

    group_of_row: (total_q,) int64 group of each query row (a request, a tile of tokens, ...).
    One torch.unique over (head, group, block) keys: no per-group loop.
    """
    num_kv_heads = sel.ids.shape[0]
    span = int(sel.ids.max().item()) + 1
    head = torch.arange(num_kv_heads, device=sel.ids.device)[:, None, None]
    key = (head * num_groups + group_of_row[None, :, None]) * span + sel.ids
    unique = torch.unique(key[sel.keep])
    counts = torch.bincount(unique // span, minlength=num_kv_heads * num_groups)
    return counts.view(num_kv_heads, num_groups)


def kv_bytes(sel: Selection, batch_size: int, head_dim: int = 128, elem_bytes: int = 2,
             row_bytes: int | None = None) -> int:
    """Contract section 10: K and V bytes of the distinct selected blocks per (request, KV head).

    A selected block counts whole (128 tokens): that is what a block load moves, and a tail
    block is at most one of the >= 16 blocks a request reads. row_bytes: bytes of one key row
    of K (or V) of one head, when not head_dim * elem_bytes (NVFP4: D/2 + D/16 scale bytes,
    bench.common.kv_row_bytes).
    """
    blocks = int(distinct_blocks(sel.request, sel, batch_size).sum().item())
    return blocks * 2 * BLOCK * (head_dim * elem_bytes if row_bytes is None else row_bytes)


def union_stats(sel: Selection, tiles=(8, 16, 64, 128)) -> dict[int, float]:
    """Mean distinct blocks per KV head over tiles of consecutive query rows (rows of one
    request only; a tile is cut at request boundaries by construction of the group id)."""
    total_q = sel.ids.shape[1]
    rows = torch.arange(total_q, device=sel.ids.device)
    out = {}
    for tile in tiles:
        # Group = (request, tile within request), numbered densely through the row index.
        group = sel.request * (total_q // tile + 1) + rows // tile
        _, group = torch.unique(group, return_inverse=True)
        num_groups = int(group.max().item()) + 1
        out[tile] = distinct_blocks(group, sel, num_groups).double().mean().item()
    return out
