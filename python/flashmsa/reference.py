"""A PyTorch evaluation of the contract on sampled query rows, and the useful-work count of
section 10. The command-line bench uses both to check and score a run on any device.

evaluate_rows gathers, for each sampled row, only the keys of its selected blocks, so checking
a few hundred rows of a 131072-token prefill costs milliseconds on a GPU. It shares no code with
the library's backends; the test suite's own oracle (tests/torch_reference.py) is written
independently again, and each is tested against the other.
"""
import math

import torch

from .quantize import dequantize_kv

BLOCK_SIZE = 128


def _first_positions(q_offset, seqlen_q, seqlen_k):
    """Causal position of every request's first query (section 5), int64 (B,)."""
    if q_offset is None:
        return seqlen_k - seqlen_q
    if isinstance(q_offset, int):
        return torch.full_like(seqlen_k, q_offset)
    return q_offset.to(device=seqlen_k.device, dtype=torch.int64)


class _Requests:
    """Per-request lengths and offsets as int64 tensors on the run's device."""

    def __init__(self, q2k_indices, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table,
                 q_offset, causal):
        device = q2k_indices.device
        self.cu_q = cu_seqlens_q.to(device=device, dtype=torch.int64)
        self.paged = page_table is not None
        if self.paged:
            self.seqlen_k = seqused_k.to(device=device, dtype=torch.int64)
            self.max_pages = page_table.shape[1]
        else:
            self.cu_k = cu_seqlens_k.to(device=device, dtype=torch.int64)
            self.seqlen_k = self.cu_k[1:] - self.cu_k[:-1]
        self.first_position = _first_positions(q_offset, self.cu_q[1:] - self.cu_q[:-1],
                                               self.seqlen_k)
        self.causal = causal
        self.q2k_indices = q2k_indices

    def select(self, rows):
        """For query rows (R,): (request, ids, valid, limit) where ids (Hkv, R, topk) are the
        block ids, valid marks the members of each selected set (section 4: cut at the first
        negative, in range, each id once) and limit (R,) is one past the last readable key."""
        request = torch.searchsorted(self.cu_q[1:], rows, right=True)
        seqlen_k = self.seqlen_k[request]
        limit = seqlen_k
        if self.causal:
            position = self.first_position[request] + rows - self.cu_q[request]
            limit = torch.minimum(seqlen_k, (position + 1).clamp(min=0))
        ids = self.q2k_indices[:, rows, :].to(torch.int64)
        valid = torch.cumprod((ids >= 0).to(torch.int64), dim=-1).bool()
        valid &= ids < ((seqlen_k + BLOCK_SIZE - 1) // BLOCK_SIZE).view(1, -1, 1)
        if self.paged:
            valid &= ids < self.max_pages
        sentinel = torch.iinfo(torch.int64).max
        ordered, order = torch.sort(torch.where(valid, ids, sentinel), dim=-1)
        kept = ordered != sentinel
        kept[..., 1:] &= ordered[..., 1:] != ordered[..., :-1]
        valid = torch.zeros_like(valid).scatter_(-1, order, kept)
        return request, torch.where(valid, ids, 0), valid, limit


def keys_read(q2k_indices, cu_seqlens_q, cu_seqlens_k=None, causal=False, page_table=None,
              seqused_k=None, q_offset=None, rows_per_chunk=1 << 16):
    """Keys each (KV head, query row) reads (section 4), int64 (Hkv, total_q).

    Useful FLOPs (section 10) = 4 * D * G * keys_read(...).sum().
    """
    requests = _Requests(q2k_indices, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table,
                         q_offset, causal)
    total_q = q2k_indices.shape[1]
    counts = torch.zeros(q2k_indices.shape[0], total_q, dtype=torch.int64,
                         device=q2k_indices.device)
    for start in range(0, total_q, rows_per_chunk):
        rows = torch.arange(start, min(total_q, start + rows_per_chunk),
                            device=q2k_indices.device)
        _, ids, valid, limit = requests.select(rows)
        in_block = (limit.view(1, -1, 1) - ids * BLOCK_SIZE).clamp(0, BLOCK_SIZE)
        counts[:, rows] = torch.where(valid, in_block, 0).sum(-1)
    return counts


_SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def evaluate_rows(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k=None, causal=False,
                  softmax_scale=None, page_table=None, seqused_k=None, k_scale=None,
                  v_scale=None, k_global_scale=None, v_global_scale=None, q_offset=None,
                  lse_temperature_scale=1.0, rows=None):
    """float64 (out (R, Hq, D), lse (R, Hq), lse_t (R, Hq)) for the query rows `rows` (all rows
    when None), from the call's own arguments."""
    device = q.device
    paged = page_table is not None
    total_q, num_qo_heads, head_dim = q.shape
    num_kv_heads, _, topk = q2k_indices.shape
    group_size = num_qo_heads // num_kv_heads
    requests = _Requests(q2k_indices, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table,
                         q_offset, causal)
    # 16-bit K/V are gathered as stored and widened per chunk: converting a whole serving-size
    # cache to float32 first would need twice its size again (the decode benchmark's 49 GiB
    # cache ran out of memory). Quantized formats are decoded up front (test sizes).
    k_values = k if k.dtype in _SIXTEEN_BIT else dequantize_kv(k, k_scale, paged)
    v_values = v if v.dtype in _SIXTEEN_BIT else dequantize_kv(v, v_scale, paged)
    if paged:
        table = page_table.to(torch.int64)

    scale = head_dim ** -0.5 if softmax_scale is None else float(softmax_scale)
    scale *= 1.0 if k_global_scale is None else float(k_global_scale)
    v_factor = 1.0 if v_global_scale is None else float(v_global_scale)
    temperature = float(lse_temperature_scale)

    rows = torch.arange(total_q, device=device) if rows is None else rows.to(device)
    out = torch.zeros(rows.numel(), num_qo_heads, head_dim, dtype=torch.float64, device=device)
    lse = torch.full((rows.numel(), num_qo_heads), -math.inf, dtype=torch.float64, device=device)
    lse_t = lse.clone()
    # Gathered K and V of a chunk: rows * Hkv * topk * 128 * D * 8 bytes each, about 128 MiB.
    rows_per_chunk = max(1, (1 << 27) // (num_kv_heads * topk * BLOCK_SIZE * head_dim * 8))
    heads = torch.arange(num_kv_heads, device=device).view(-1, 1, 1, 1)
    in_block = torch.arange(BLOCK_SIZE, device=device)
    for start in range(0, rows.numel(), rows_per_chunk):
        chunk = rows[start:start + rows_per_chunk]
        count = chunk.numel()
        request, ids, valid, limit = requests.select(chunk)
        position = ids.unsqueeze(-1) * BLOCK_SIZE + in_block  # (Hkv, R, topk, 128)
        readable = valid.unsqueeze(-1) & (position < limit.view(1, -1, 1, 1))
        if paged:
            page = table[request.view(1, -1, 1), ids.clamp(max=table.shape[1] - 1)]
            page_ok = (page >= 0) & (page < k.shape[0])  # not a page: reads nothing
            readable &= page_ok.unsqueeze(-1)
            page = torch.where(page_ok, page, 0).unsqueeze(-1).expand_as(position)
            token = in_block.expand_as(position)
            k_rows, v_rows = k_values[page, heads, token], v_values[page, heads, token]
        else:
            key_row = (requests.cu_k[request].view(1, -1, 1, 1) + position).clamp(
                0, max(k.shape[0] - 1, 0))
            k_rows, v_rows = k_values[key_row, heads], v_values[key_row, heads]
        width = topk * BLOCK_SIZE
        k_rows = k_rows.reshape(num_kv_heads, count, width, head_dim).double()
        v_rows = v_rows.reshape(num_kv_heads, count, width, head_dim).double()
        readable = readable.reshape(num_kv_heads, count, 1, width)

        q_rows = q[chunk].double().view(count, num_kv_heads, group_size, head_dim)
        scores = torch.einsum("rhgd,hrkd->hrgk", q_rows, k_rows) * scale
        scores = scores.masked_fill(~readable, -math.inf)
        row_lse = torch.logsumexp(scores, dim=-1)
        row_lse_t = torch.logsumexp(scores * temperature, dim=-1)
        # exp(-inf - (-inf)) is NaN for rows that read nothing: those get 0.
        probabilities = torch.nan_to_num(torch.exp(scores - row_lse.unsqueeze(-1)), nan=0.0)
        row_out = torch.einsum("hrgk,hrkd->hrgd", probabilities, v_rows) * v_factor

        span = slice(start, start + count)
        out[span] = row_out.permute(1, 0, 2, 3).reshape(count, num_qo_heads, head_dim)
        lse[span] = row_lse.permute(1, 0, 2).reshape(count, num_qo_heads)
        lse_t[span] = row_lse_t.permute(1, 0, 2).reshape(count, num_qo_heads)
    return out, lse, lse_t
