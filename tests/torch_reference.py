"""An independent fp64 PyTorch evaluation of the MSA contract (shared/spec/msa_sparse_attention.md).

Written from the contract alone and never calling flashmsa, so that the library's backends are
checked against something that cannot share their mistakes. It runs on CPU or CUDA tensors (on
the tensors' own device) and evaluates the query rows in chunks, gathering only the selected
blocks, so memory stays bounded and long sequences can be checked on a sample of rows.

    out, lse, lse_t = reference_msa(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k, ...)
    check_close(flashmsa_out, out, q.dtype, lse=flashmsa_lse, ref_lse=lse, case="...")
"""
import math

import torch

BLOCK_SIZE = 128  # tokens per selectable key block (= page size), contract section 1
SCALES_PER_ROW = 8  # NVFP4: one E4M3 scale per 16 of the 128 elements of a row

# E2M1 magnitudes by their 3 low bits; bit 3 is the sign (contract section 6).
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)

# Bounds of contract section 7.
MAX_ABS_ERROR = 2.5e-2
MAX_REL_L2_ERROR = 1e-2
MAX_LSE_ERROR = 1e-2


# ---------------------------------------------------------------------------------------------
# Dequantisers
# ---------------------------------------------------------------------------------------------

def e4m3_bytes_to_float(data):
    """uint8 bytes (or float8_e4m3fn values) of E4M3 numbers -> float32, exactly."""
    if data.dtype == torch.uint8:
        data = data.view(torch.float8_e4m3fn)
    return data.to(torch.float32)


def swizzled_scale_offset(rows, cols):
    """Byte offset of logical NVFP4 scale (rows, cols) in the swizzled 128x4 layout (section 6).

    rows and cols are int64 tensors (broadcast against each other); the table has SCALES_PER_ROW
    columns, i.e. ceil(8 / 4) = 2 column groups of 4 per 128-row tile.
    """
    column_groups = (SCALES_PER_ROW + 3) // 4
    return (((rows // 128) * column_groups + cols // 4) * 512 + (rows % 32) * 16
            + ((rows % 128) // 32) * 4 + cols % 4)


def dequantize_nvfp4(packed, scale_bytes, paged):
    """Packed NVFP4 K or V -> float32 of the logical shape (..., D).

    packed: uint8 (total_k, Hkv, D/2) flat or (num_pages, Hkv, 128, D/2) paged, any strides.
    scale_bytes: uint8 or float8_e4m3fn tensor holding the swizzled E4M3 scales (flattened).
    The row of the scale table is token * Hkv + head (flat) or (page * Hkv + head) * 128 +
    token_in_page (paged); every group of 16 consecutive elements of a row shares one scale.
    """
    table = torch.tensor(_E2M1_VALUES, dtype=torch.float32, device=packed.device)
    low = table[(packed & 0xF).long()]
    high = table[(packed >> 4).long()]
    # The low nibble is the even element.
    values = torch.stack((low, high), dim=-1).flatten(-2)
    head_dim = values.shape[-1]
    if paged:
        num_pages, num_heads, page_size = values.shape[:3]
        page = torch.arange(num_pages, device=packed.device).view(-1, 1, 1)
        head = torch.arange(num_heads, device=packed.device).view(1, -1, 1)
        token = torch.arange(page_size, device=packed.device).view(1, 1, -1)
        rows = (page * num_heads + head) * BLOCK_SIZE + token
    else:
        num_tokens, num_heads = values.shape[:2]
        token = torch.arange(num_tokens, device=packed.device).view(-1, 1)
        head = torch.arange(num_heads, device=packed.device).view(1, -1)
        rows = token * num_heads + head
    cols = torch.arange(head_dim // 16, device=packed.device)
    offsets = swizzled_scale_offset(rows.unsqueeze(-1), cols)
    scales = e4m3_bytes_to_float(scale_bytes.reshape(-1)[offsets])
    return values * scales.repeat_interleave(16, dim=-1)


def dequantize_kv(x, scale_bytes=None, paged=False):
    """K or V in any supported storage (bf16, fp16, fp8 E4M3, packed NVFP4) -> float32, exactly."""
    if x.dtype == torch.uint8:
        if scale_bytes is None:
            raise ValueError("NVFP4 K/V needs its block scales")
        return dequantize_nvfp4(x, scale_bytes, paged)
    return x.to(torch.float32)


# ---------------------------------------------------------------------------------------------
# The evaluation
# ---------------------------------------------------------------------------------------------

def _per_request(value, batch_size, device, name):
    """q_offset as given (int or (B,) tensor) -> int64 (B,) tensor."""
    if isinstance(value, int):
        return torch.full((batch_size,), value, dtype=torch.int64, device=device)
    value = torch.as_tensor(value, device=device).to(torch.int64).reshape(-1)
    if value.numel() != batch_size:
        raise ValueError(f"{name} must have {batch_size} entries")
    return value


def reference_msa(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k=None, causal=False,
                  softmax_scale=None, page_table=None, seqused_k=None, k_scale=None,
                  v_scale=None, k_global_scale=None, v_global_scale=None, q_offset=None,
                  lse_temperature_scale=1.0, *, query_rows=None, compute_dtype=torch.float64,
                  rows_per_chunk=None):
    """Contract sections 4-6, evaluated directly. Returns (out, lse, lse_t) in compute_dtype.

    out is (rows, Hq, D), lse and lse_t are (rows, Hq), where rows are all query rows, or the
    global row indices given in query_rows (in that order). compute_dtype=float64 is the oracle;
    passing q's dtype gives the "plain PyTorch evaluation in q's dtype" of section 7 (scores,
    softmax and P.V all in that dtype), the baseline of its tighter bound.
    """
    device = q.device
    paged = page_table is not None
    total_q, num_qo_heads, head_dim = q.shape
    num_kv_heads = q2k_indices.shape[0]
    topk = q2k_indices.shape[2]
    group_size = num_qo_heads // num_kv_heads
    batch_size = cu_seqlens_q.numel() - 1

    # K/V in float32 hold every supported storage format exactly.
    k_values = dequantize_kv(k, k_scale, paged)
    v_values = dequantize_kv(v, v_scale, paged)

    cu_q = cu_seqlens_q.to(device=device, dtype=torch.int64)
    if paged:
        seqlen_k = seqused_k.to(device=device, dtype=torch.int64)
        table = page_table.to(device=device, dtype=torch.int64)
        max_pages = table.shape[1]
        num_pages = k.shape[0]
    else:
        cu_k = cu_seqlens_k.to(device=device, dtype=torch.int64)
        seqlen_k = cu_k[1:] - cu_k[:-1]
        total_k = k.shape[0]
    seqlen_q = cu_q[1:] - cu_q[:-1]
    if q_offset is None:
        first_position = seqlen_k - seqlen_q
    else:
        first_position = _per_request(q_offset, batch_size, device, "q_offset")

    scale = head_dim ** -0.5 if softmax_scale is None else float(softmax_scale)
    scale *= 1.0 if k_global_scale is None else float(k_global_scale)
    v_factor = 1.0 if v_global_scale is None else float(v_global_scale)
    temperature = float(lse_temperature_scale)

    if query_rows is None:
        rows_all = torch.arange(total_q, device=device)
    else:
        rows_all = torch.as_tensor(query_rows, device=device).to(torch.int64).reshape(-1)
    num_rows = rows_all.numel()
    out = torch.zeros(num_rows, num_qo_heads, head_dim, dtype=compute_dtype, device=device)
    lse = torch.full((num_rows, num_qo_heads), -math.inf, dtype=compute_dtype, device=device)
    lse_t = lse.clone()
    if num_rows == 0:
        return out, lse, lse_t

    # Gathered K and V of a chunk take rows * Hkv * topk * 128 * D * 8 bytes each: keep it
    # around 128 MiB.
    if rows_per_chunk is None:
        rows_per_chunk = max(1, (1 << 27) // (num_kv_heads * topk * BLOCK_SIZE * head_dim * 8))
    heads = torch.arange(num_kv_heads, device=device).view(-1, 1, 1, 1)
    in_block = torch.arange(BLOCK_SIZE, device=device)

    for start in range(0, num_rows, rows_per_chunk):
        rows = rows_all[start:start + rows_per_chunk]
        request = torch.searchsorted(cu_q[1:], rows, right=True)  # (R,)
        local = rows - cu_q[request]
        keys = seqlen_k[request]
        limit = keys
        if causal:
            limit = torch.minimum(keys, first_position[request] + local + 1)

        # Section 4: read left to right, the first negative entry ends the list ...
        ids = q2k_indices[:, rows, :].to(torch.int64)  # (Hkv, R, topk)
        valid = torch.cumprod((ids >= 0).to(torch.int64), dim=-1).bool()
        # ... ids past the request's blocks (or the page table) select nothing ...
        valid &= ids < ((keys + BLOCK_SIZE - 1) // BLOCK_SIZE).view(1, -1, 1)
        if paged:
            valid &= ids < max_pages
        # ... and the rest form a set: a repeated id counts once.
        sentinel = torch.iinfo(torch.int64).max
        ordered, order = torch.sort(torch.where(valid, ids, sentinel), dim=-1)
        kept = ordered != sentinel
        kept[..., 1:] &= ordered[..., 1:] != ordered[..., :-1]
        valid = torch.zeros_like(valid).scatter_(-1, order, kept)
        ids = torch.where(valid, ids, 0)

        # Key positions of every selected block: (Hkv, R, topk, 128).
        position = ids.unsqueeze(-1) * BLOCK_SIZE + in_block
        readable = valid.unsqueeze(-1) & (position < limit.view(1, -1, 1, 1))
        if paged:
            page = table[request.view(1, -1, 1), ids.clamp(max=max_pages - 1)]
            # A table entry that is not a page reads nothing rather than out of bounds.
            page_ok = (page >= 0) & (page < num_pages)
            readable &= page_ok.unsqueeze(-1)
            page = torch.where(page_ok, page, 0).unsqueeze(-1).expand_as(position)
            token = in_block.expand_as(position)
            k_rows = k_values[page, heads, token]
            v_rows = v_values[page, heads, token]
        else:
            flat_row = (cu_k[request].view(1, -1, 1, 1) + position).clamp(0, max(total_k - 1, 0))
            k_rows = k_values[flat_row, heads]
            v_rows = v_values[flat_row, heads]
        num_r = rows.numel()
        k_rows = k_rows.reshape(num_kv_heads, num_r, topk * BLOCK_SIZE, head_dim).to(compute_dtype)
        v_rows = v_rows.reshape(num_kv_heads, num_r, topk * BLOCK_SIZE, head_dim).to(compute_dtype)
        readable = readable.reshape(num_kv_heads, num_r, 1, topk * BLOCK_SIZE)

        # Query head hq belongs to KV head hq // G.
        q_rows = q[rows].to(compute_dtype).view(num_r, num_kv_heads, group_size, head_dim)
        q_rows = q_rows.permute(1, 0, 2, 3)  # (Hkv, R, G, D)
        scores = torch.einsum("hrgd,hrkd->hrgk", q_rows, k_rows) * scale
        scores = scores.masked_fill(~readable, -math.inf)
        row_lse = torch.logsumexp(scores, dim=-1)  # -inf where the row reads nothing
        row_lse_t = torch.logsumexp(scores * temperature, dim=-1)
        probabilities = torch.exp(scores - row_lse.unsqueeze(-1))
        probabilities = torch.nan_to_num(probabilities, nan=0.0)  # rows that read nothing
        row_out = torch.einsum("hrgk,hrkd->hrgd", probabilities, v_rows) * v_factor

        span = slice(start, start + num_r)
        out[span] = row_out.permute(1, 0, 2, 3).reshape(num_r, num_qo_heads, head_dim)
        lse[span] = row_lse.permute(1, 0, 2).reshape(num_r, num_qo_heads)
        lse_t[span] = row_lse_t.permute(1, 0, 2).reshape(num_r, num_qo_heads)
    return out, lse, lse_t


# ---------------------------------------------------------------------------------------------
# Comparison (contract section 7)
# ---------------------------------------------------------------------------------------------

def error_stats(out, ref):
    """(max abs error, relative L2 error) of out against ref, in float64."""
    out = out.to(torch.float64)
    ref = ref.to(device=out.device, dtype=torch.float64)
    diff = out - ref
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    diff_norm = torch.linalg.vector_norm(diff).item()
    ref_norm = torch.linalg.vector_norm(ref).item()
    if ref_norm == 0.0:
        rel_l2 = 0.0 if diff_norm == 0.0 else math.inf
    else:
        rel_l2 = diff_norm / ref_norm
    return max_abs, rel_l2


def check_close(out, ref, q_dtype, *, lse=None, ref_lse=None, lse_t=None, ref_lse_t=None,
                baseline=None, slack=1e-3, case=""):
    """Assert the bounds of section 7; the AssertionError names the case and the failing bound.

    out: the library's output; ref: reference_msa's float64 output (same rows). lse / lse_t
    with ref_lse / ref_lse_t are checked when given. baseline, when given, is a plain PyTorch
    evaluation in q's dtype (reference_msa(..., compute_dtype=q_dtype)): out's max abs error
    must then be at most twice the baseline's, plus slack.
    """
    label = f"[{case}] " if case else ""
    dtype_name = str(q_dtype).replace("torch.", "")
    assert out.shape == ref.shape, f"{label}out shape {tuple(out.shape)} != {tuple(ref.shape)}"
    out_finite = torch.isfinite(out.to(torch.float32))
    assert bool(out_finite.all()), (
        f"{label}out has {int((~out_finite).sum())} NaN/inf values (q {dtype_name})")
    max_abs, rel_l2 = error_stats(out, ref)
    assert max_abs < MAX_ABS_ERROR, (
        f"{label}max |out - ref| = {max_abs:.3e} >= {MAX_ABS_ERROR} (q {dtype_name}, "
        f"rel L2 {rel_l2:.3e})")
    assert rel_l2 < MAX_REL_L2_ERROR, (
        f"{label}relative L2 error {rel_l2:.3e} >= {MAX_REL_L2_ERROR} (q {dtype_name}, "
        f"max abs {max_abs:.3e})")
    if baseline is not None:
        baseline_abs, _ = error_stats(baseline, ref)
        assert max_abs <= 2 * baseline_abs + slack, (
            f"{label}max abs error {max_abs:.3e} > 2 x plain {dtype_name} evaluation's "
            f"{baseline_abs:.3e} + {slack}")
    for name, got, want in (("lse", lse, ref_lse), ("lse_t", lse_t, ref_lse_t)):
        if got is None or want is None:
            continue
        _check_lse(name, got, want, label)


def _check_lse(name, got, want, label):
    got = got.to(torch.float64)
    want = want.to(device=got.device, dtype=torch.float64)
    assert got.shape == want.shape, f"{label}{name} shape {tuple(got.shape)} != {tuple(want.shape)}"
    want_empty = torch.isneginf(want)
    got_empty = torch.isneginf(got)
    mismatched = int((want_empty != got_empty).sum())
    assert mismatched == 0, (
        f"{label}{name} is -inf at {int(got_empty.sum())} entries, the reference at "
        f"{int(want_empty.sum())}: {mismatched} disagree")
    finite = ~want_empty
    assert bool(torch.isfinite(got[finite]).all()), f"{label}{name} has NaN/inf on finite entries"
    if bool(finite.any()):
        error = (got[finite] - want[finite]).abs().max().item()
        assert error < MAX_LSE_ERROR, f"{label}max |{name} - ref| = {error:.3e} >= {MAX_LSE_ERROR}"
