"""An independent fp64 PyTorch evaluation of the MSA contract (shared/spec/msa_sparse_attention.md).

Written from the contract alone and never calling flashmsa, so that the library's backends are
checked against something that cannot share their mistakes. It runs on CPU or CUDA tensors (on
the tensors' own device), request by request and in chunks of query rows, so memory stays
bounded and long sequences can be checked on a sample of rows (query_rows=).

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

def reference_msa(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k=None, causal=False,
                  softmax_scale=None, page_table=None, seqused_k=None, k_scale=None,
                  v_scale=None, k_global_scale=None, v_global_scale=None, q_offset=None,
                  lse_temperature_scale=1.0, *, query_rows=None, compute_dtype=torch.float64):
    """Contract sections 4-6, evaluated directly. Returns float64 (out, lse, lse_t); fp32 for
    a low-precision compute_dtype.

    out is (rows, Hq, D), lse and lse_t are (rows, Hq), where rows are all query rows, or the
    global row indices given in query_rows (in that order). compute_dtype=float64 is the oracle.
    Passing q's dtype gives the "plain PyTorch evaluation in q's dtype" of section 7, the
    baseline of its tighter bound: as a GPU matmul in that dtype does, products accumulate in
    fp32 and the scores, probabilities and output are rounded to q's dtype.

    Each request is evaluated densely against its own keys, with a mask built from the
    selection rules: simple to audit, and cheap for the lengths tests use. Sequence lengths and
    offsets are read on the host.
    """
    device = q.device
    paged = page_table is not None
    total_q, num_qo_heads, head_dim = q.shape
    num_kv_heads = q2k_indices.shape[0]
    group_size = num_qo_heads // num_kv_heads
    batch_size = cu_seqlens_q.numel() - 1

    # K/V in float32 hold every supported storage format exactly.
    k_values = dequantize_kv(k, k_scale, paged)
    v_values = dequantize_kv(v, v_scale, paged)

    cu_q = cu_seqlens_q.tolist()
    if paged:
        seqlen_k = seqused_k.tolist()
        table = page_table.to(device=device, dtype=torch.int64)
    else:
        cu_k = cu_seqlens_k.tolist()
        seqlen_k = [cu_k[b + 1] - cu_k[b] for b in range(batch_size)]
    if q_offset is None:
        first_position = [seqlen_k[b] - (cu_q[b + 1] - cu_q[b]) for b in range(batch_size)]
    elif isinstance(q_offset, int):
        first_position = [q_offset] * batch_size
    else:
        first_position = torch.as_tensor(q_offset).reshape(-1).tolist()

    # Low-precision evaluations work in fp32 and round where a kernel in that dtype would.
    work_dtype = torch.float64 if compute_dtype == torch.float64 else torch.float32

    def rounded(x):
        return x if compute_dtype == work_dtype else x.to(compute_dtype).to(work_dtype)

    scale = head_dim ** -0.5 if softmax_scale is None else float(softmax_scale)
    scale *= 1.0 if k_global_scale is None else float(k_global_scale)
    v_factor = 1.0 if v_global_scale is None else float(v_global_scale)
    temperature = float(lse_temperature_scale)

    if query_rows is None:
        rows_all = torch.arange(total_q, device=device)
    else:
        rows_all = torch.as_tensor(query_rows, device=device).to(torch.int64).reshape(-1)
    num_rows = rows_all.numel()
    out = torch.zeros(num_rows, num_qo_heads, head_dim, dtype=work_dtype, device=device)
    lse = torch.full((num_rows, num_qo_heads), -math.inf, dtype=work_dtype, device=device)
    lse_t = lse.clone()
    request_of_row = torch.searchsorted(
        torch.tensor(cu_q[1:], device=device), rows_all, right=True)

    for b in range(batch_size):
        slots = (request_of_row == b).nonzero().squeeze(1)  # positions in the output
        if slots.numel() == 0:
            continue
        rows = rows_all[slots]
        # Blocks that exist for this request: those holding keys < seqlen_k, and on the paged
        # path only those the page table has a column for.
        num_blocks = -(-seqlen_k[b] // BLOCK_SIZE)
        if paged:
            num_blocks = min(num_blocks, table.shape[1])
        if num_blocks <= 0:
            continue  # no keys: out stays 0 and lse -inf
        keys, block_ok = _request_keys(k_values, v_values, b, num_blocks, paged,
                                       table if paged else None, cu_k[b] if not paged else 0)
        k_request, v_request = (x.to(work_dtype) for x in keys)  # (Hkv, keys, D)
        num_keys = min(seqlen_k[b], num_blocks * BLOCK_SIZE)
        k_request, v_request = k_request[:, :num_keys], v_request[:, :num_keys]
        key_position = torch.arange(num_keys, device=device)

        # Scores of a chunk take Hkv * rows * G * keys elements: keep them near 2^24.
        rows_per_chunk = max(1, (1 << 24) // max(1, num_kv_heads * group_size * num_keys))
        for start in range(0, rows.numel(), rows_per_chunk):
            chunk_slots = slots[start:start + rows_per_chunk]
            chunk_rows = rows[start:start + rows_per_chunk]
            selected = _selected_blocks(q2k_indices[:, chunk_rows, :], num_blocks) & block_ok
            readable = selected.repeat_interleave(BLOCK_SIZE, dim=-1)[..., :num_keys]
            if causal:
                position = first_position[b] + (chunk_rows - cu_q[b])
                readable = readable & (key_position <= position.unsqueeze(1))
            readable = readable.unsqueeze(2)  # (Hkv, R, 1, keys)

            # Query head hq belongs to KV head hq // G.
            num_r = chunk_rows.numel()
            q_chunk = q[chunk_rows].to(work_dtype).view(num_r, num_kv_heads, group_size,
                                                           head_dim).permute(1, 0, 2, 3)
            scores = rounded(torch.einsum("hrgd,hkd->hrgk", q_chunk, k_request)) * scale
            scores = scores.masked_fill(~readable, -math.inf)
            row_lse = torch.logsumexp(scores, dim=-1)  # -inf where the row reads nothing
            row_lse_t = torch.logsumexp(scores * temperature, dim=-1)
            probabilities = torch.exp(scores - row_lse.unsqueeze(-1))
            probabilities = rounded(torch.nan_to_num(probabilities, nan=0.0))  # nan: reads nothing
            row_out = rounded(torch.einsum("hrgk,hkd->hrgd", probabilities, v_request) * v_factor)

            out[chunk_slots] = row_out.permute(1, 0, 2, 3).reshape(num_r, num_qo_heads, head_dim)
            lse[chunk_slots] = row_lse.permute(1, 0, 2).reshape(num_r, num_qo_heads)
            lse_t[chunk_slots] = row_lse_t.permute(1, 0, 2).reshape(num_r, num_qo_heads)
    return out, lse, lse_t


def _selected_blocks(ids, num_blocks):
    """Section 4 rules 1-3 on (Hkv, R, topk) ids -> (Hkv, R, num_blocks) bool."""
    ids = ids.to(torch.int64)
    # The first negative entry ends the list ...
    before_end = torch.cumprod((ids >= 0).to(torch.int64), dim=-1).bool()
    # ... ids past the request's blocks select nothing ...
    valid = before_end & (ids < num_blocks)
    # ... and the rest form a set (scattering a repeated id twice is the same as once).
    selected = torch.zeros(*ids.shape[:2], num_blocks + 1, dtype=torch.bool, device=ids.device)
    selected.scatter_(-1, torch.where(valid, ids, num_blocks), True)
    return selected[..., :num_blocks]


def _request_keys(k_values, v_values, b, num_blocks, paged, table, first_key):
    """The request's K and V as (Hkv, num_blocks * 128, D) (flat: its rows, up to its length),
    and which blocks may be read at all: a page-table entry that is not a page reads nothing,
    the library's choice where the contract is silent."""
    device = k_values.device
    if not paged:
        length = num_blocks * BLOCK_SIZE
        keys = tuple(x[first_key:first_key + length].transpose(0, 1)
                     for x in (k_values, v_values))
        return keys, torch.ones(num_blocks, dtype=torch.bool, device=device)
    pages = table[b, :num_blocks]
    page_ok = (pages >= 0) & (pages < k_values.shape[0])
    pages = torch.where(page_ok, pages, 0)
    keys = tuple(x[pages].permute(1, 0, 2, 3).reshape(x.shape[1], num_blocks * BLOCK_SIZE, x.shape[-1])
                 for x in (k_values, v_values))
    return keys, page_ok


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
