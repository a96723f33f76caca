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

# Requests are evaluated together in one chunk while their keys span at most this many (every
# row of a chunk is scored against the whole span).
_MERGE_SPAN = 512

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


def page_local_scales(scale_bytes, value):
    """Page-local NVFP4 scale planes (num_pages, Hkv, 128, D/16), each plane contiguous ->
    float32 scales [page, head, token, group] (section 6): K's planes are linear (the view
    itself), V's in token-quad order, byte (t // 4) * 4 * C + s * 4 + t % 4 of its plane."""
    if not value:
        return e4m3_bytes_to_float(scale_bytes)
    cols = scale_bytes.shape[-1]
    plane = scale_bytes.flatten(-2)
    token = torch.arange(BLOCK_SIZE, device=scale_bytes.device).view(-1, 1)
    group = torch.arange(cols, device=scale_bytes.device).view(1, -1)
    return e4m3_bytes_to_float(plane[..., (token // 4) * 4 * cols + group * 4 + token % 4])


def dequantize_nvfp4(packed, scale_bytes, paged, value=False):
    """Packed NVFP4 K or V -> float32 of the logical shape (..., D).

    packed: uint8 (total_k, Hkv, D/2) flat or (num_pages, Hkv, 128, D/2) paged, any strides.
    scale_bytes: uint8 or float8_e4m3fn tensor holding the swizzled E4M3 scales (flattened),
    or, paged, the 4-D page-local planes (page_local_scales; `value`: V's token-quad order).
    The row of the scale table is token * Hkv + head (flat) or (page * Hkv + head) * 128 +
    token_in_page (paged); every group of 16 consecutive elements of a row shares one scale.
    """
    table = torch.tensor(_E2M1_VALUES, dtype=torch.float32, device=packed.device)
    low = table[(packed & 0xF).long()]
    high = table[(packed >> 4).long()]
    # The low nibble is the even element.
    values = torch.stack((low, high), dim=-1).flatten(-2)
    head_dim = values.shape[-1]
    if scale_bytes.dim() == 4:
        return values * page_local_scales(scale_bytes, value).repeat_interleave(16, dim=-1)
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


def dequantize_kv(x, scale_bytes=None, paged=False, value=False):
    """K or V in any supported storage (bf16, fp16, fp8 E4M3, packed NVFP4) -> float32, exactly.
    value: x is V (page-local NVFP4 scales are in token-quad order there)."""
    if x.dtype == torch.uint8:
        if scale_bytes is None:
            raise ValueError("NVFP4 K/V needs its block scales")
        return dequantize_nvfp4(x, scale_bytes, paged, value)
    return x.to(torch.float32)


# ---------------------------------------------------------------------------------------------
# The evaluation
# ---------------------------------------------------------------------------------------------

def reference_msa(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k=None, causal=False,
                  softmax_scale=None, page_table=None, seqused_k=None, k_scale=None,
                  v_scale=None, k_global_scale=None, v_global_scale=None, q_offset=None,
                  lse_temperature_scale=1.0, *, query_rows=None, compute_dtype=torch.float64,
                  rows_per_chunk=None):
    """Contract sections 4-6, evaluated directly. Returns float64 (out, lse, lse_t); fp32 for
    a low-precision compute_dtype.

    out is (rows, Hq, D), lse and lse_t are (rows, Hq), where rows are all query rows, or the
    global row indices given in query_rows (in that order). compute_dtype=float64 is the oracle.
    Passing q's dtype gives the "plain PyTorch evaluation in q's dtype" of section 7, the
    baseline of its tighter bound: as a GPU matmul in that dtype does, products accumulate in
    fp32 and the scores, probabilities and output are rounded to q's dtype.

    Every query row is scored densely against all keys of its request, and a mask built from
    the selection rules keeps the readable ones: simple to audit. The keys of all requests are
    first laid end to end, so that a chunk of rows may span many small requests (a row masks
    the other requests' keys). Sequence lengths and offsets are read on the host. Chunks keep
    the scores near 2^24 elements, or hold rows_per_chunk rows when given (for GPUs).
    """
    device = q.device
    total_q, num_qo_heads, head_dim = q.shape
    num_kv_heads = q2k_indices.shape[0]
    group_size = num_qo_heads // num_kv_heads

    keys = _KeyTable(k, v, k_scale, v_scale, cu_seqlens_k, page_table, seqused_k)
    cu_q = cu_seqlens_q.tolist()
    batch_size = len(cu_q) - 1
    if q_offset is None:
        first_position = [keys.seqlen_k[b] - (cu_q[b + 1] - cu_q[b]) for b in range(batch_size)]
    elif isinstance(q_offset, int):
        first_position = [q_offset] * batch_size
    else:
        first_position = torch.as_tensor(q_offset).reshape(-1).tolist()

    # Low-precision evaluations work in fp32 and round where a kernel in that dtype would.
    work_dtype = torch.float64 if compute_dtype == torch.float64 else torch.float32

    def rounded(x):
        return x if compute_dtype == work_dtype else x.to(compute_dtype).to(work_dtype)

    k_all, v_all = keys.k.to(work_dtype), keys.v.to(work_dtype)  # (Hkv, all keys, D)
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
    if num_rows == 0:
        return out, lse, lse_t

    # Rows sorted by request, so that a chunk is a run of consecutive requests.
    request_cpu = torch.searchsorted(torch.tensor(cu_q[1:]), rows_all.cpu(), right=True)
    order_cpu = torch.argsort(request_cpu, stable=True)
    sorted_request = request_cpu[order_cpu].tolist()
    order = order_cpu.to(device)
    request_of = torch.tensor(sorted_request, device=device)
    first_position_of = torch.tensor(first_position, device=device)[request_of]
    local_of = rows_all[order] - torch.tensor(cu_q, device=device)[request_of]

    requests, run_lengths = torch.unique_consecutive(request_cpu[order_cpu], return_counts=True)
    run_ends = torch.cumsum(run_lengths, 0).tolist()
    runs = [(request, end - length, end) for request, length, end in
            zip(requests.tolist(), run_lengths.tolist(), run_ends)]
    for begin, end in _chunks(runs, keys, num_qo_heads, rows_per_chunk):
        slots = order[begin:end]  # positions in the output
        rows = rows_all[slots]
        request = request_of[begin:end]
        key_begin = keys.start[sorted_request[begin]]
        key_end = keys.start[sorted_request[end - 1]] + keys.count[sorted_request[end - 1]]
        span = slice(key_begin, key_end)
        if key_end == key_begin:
            continue  # no keys at all: out stays 0 and lse -inf
        key_block = keys.block[span]  # request-local block of every key in the span

        # A key is readable iff it belongs to the row's request, its block is selected and
        # exists (section 4), and, when causal, it is not after the row's position (section 5).
        selected = _selected_blocks(q2k_indices[:, rows, :], keys.max_blocks)
        readable = selected.gather(-1, key_block.expand(num_kv_heads, rows.numel(), -1))
        readable &= keys.request[span] == request.unsqueeze(1)
        readable &= keys.block_ok[span]
        if causal:
            position = first_position_of[begin:end] + local_of[begin:end]
            readable &= keys.position[span] <= position.unsqueeze(1)
        readable = readable.unsqueeze(2)  # (Hkv, R, 1, keys)

        # Query head hq belongs to KV head hq // G.
        count = rows.numel()
        q_rows = q[rows].to(work_dtype).view(count, num_kv_heads, group_size, head_dim)
        scores = rounded(torch.einsum("rhgd,hkd->hrgk", q_rows, k_all[:, span])) * scale
        scores = scores.masked_fill(~readable, -math.inf)
        row_lse = torch.logsumexp(scores, dim=-1)  # -inf where the row reads nothing
        row_lse_t = torch.logsumexp(scores * temperature, dim=-1)
        # exp(-inf - (-inf)) is NaN in rows that read nothing: their probabilities are 0.
        probabilities = rounded(torch.nan_to_num(torch.exp(scores - row_lse.unsqueeze(-1))))
        row_out = rounded(torch.einsum("hrgk,hkd->hrgd", probabilities, v_all[:, span])
                          * v_factor)

        out[slots] = row_out.permute(1, 0, 2, 3).reshape(count, num_qo_heads, head_dim)
        lse[slots] = row_lse.permute(1, 0, 2).reshape(count, num_qo_heads)
        lse_t[slots] = row_lse_t.permute(1, 0, 2).reshape(count, num_qo_heads)
    return out, lse, lse_t


class _KeyTable:
    """The keys every request may read, laid end to end: request b owns entries
    start[b] .. start[b] + count[b], its request-local positions 0 .. count[b] - 1.

    k and v are (Hkv, all keys, D) float32; per key: request, position, block, and block_ok
    (False where a page-table entry is not a page: such a block reads nothing, the library's
    choice where the contract is silent). On the paged path only blocks the page table has a
    column for exist.
    """

    def __init__(self, k, v, k_scale, v_scale, cu_seqlens_k, page_table, seqused_k):
        device = k.device
        paged = page_table is not None
        # K/V in float32 hold every supported storage format exactly.
        k_values = dequantize_kv(k, k_scale, paged)
        v_values = dequantize_kv(v, v_scale, paged, value=True)
        if paged:
            self.seqlen_k = seqused_k.tolist()
            max_pages = page_table.shape[1]
            self.count = [max(0, min(length, max_pages * BLOCK_SIZE)) for length in self.seqlen_k]
        else:
            cu_k = cu_seqlens_k.tolist()
            self.seqlen_k = [end - begin for begin, end in zip(cu_k[:-1], cu_k[1:])]
            self.count = [max(0, length) for length in self.seqlen_k]
        self.start = [0]
        for count in self.count:
            self.start.append(self.start[-1] + count)
        self.max_blocks = max([-(-count // BLOCK_SIZE) for count in self.count] + [0])

        counts = torch.tensor(self.count, device=device)
        self.request = torch.repeat_interleave(torch.arange(len(self.count), device=device), counts)
        starts = torch.tensor(self.start[:-1], device=device)
        self.position = torch.arange(self.start[-1], device=device) - starts[self.request]
        self.block = self.position // BLOCK_SIZE
        if paged:
            table = page_table.to(device=device, dtype=torch.int64)
            page = table[self.request, self.block]
            self.block_ok = (page >= 0) & (page < k.shape[0])
            page = torch.where(self.block_ok, page, 0)
            token = self.position % BLOCK_SIZE
            self.k, self.v = (x[page, :, token].transpose(0, 1) for x in (k_values, v_values))
        else:
            self.block_ok = torch.ones_like(self.position, dtype=torch.bool)
            key_row = torch.tensor(cu_k[:-1], device=device)[self.request] + self.position
            self.k, self.v = (x[key_row].transpose(0, 1) for x in (k_values, v_values))


def _chunks(runs, keys, num_qo_heads, rows_per_chunk):
    """[begin, end) ranges of the sorted rows. runs: (request, begin, end) of each request's
    rows. Whole requests go together while they span at most _MERGE_SPAN keys, the scores (rows x Hq x span) stay within budget and the
    rows within rows_per_chunk; a request too big alone is split on its own."""
    largest = max(keys.count + [1])
    budget = (1 << 24) if rows_per_chunk is None else rows_per_chunk * num_qo_heads * largest
    max_rows = rows_per_chunk or math.inf
    current = None  # (begin, end, first request) of the chunk being filled
    for request, run_begin, run_end in runs:
        if current is not None:
            begin, _, first = current
            span = keys.start[request] + keys.count[request] - keys.start[first]
            if (span <= _MERGE_SPAN and (run_end - begin) * num_qo_heads * span <= budget
                    and run_end - begin <= max_rows):
                current = (begin, run_end, first)
                continue
            yield current[:2]
            current = None
        rows = run_end - run_begin
        cost = rows * num_qo_heads * max(keys.count[request], 1)
        if cost <= budget and rows <= max_rows:
            current = (run_begin, run_end, request)
            continue
        per_chunk = max(1, min(max_rows, budget // (num_qo_heads * max(keys.count[request], 1))))
        for begin in range(run_begin, run_end, per_chunk):
            yield begin, min(begin + per_chunk, run_end)
    if current is not None:
        yield current[:2]


def _selected_blocks(ids, num_blocks):
    """Section 4 rules 1-3 on (Hkv, R, topk) ids -> (Hkv, R, num_blocks) bool: block j is
    selected iff it is in the list before its first negative entry and j < num_blocks (ids of
    blocks a request lacks are masked by the caller, whose keys do not exist)."""
    ids = ids.to(torch.int64)
    # The first negative entry ends the list ...
    before_end = torch.cumprod((ids >= 0).to(torch.int64), dim=-1).bool()
    # ... ids past every block select nothing ...
    valid = before_end & (ids < num_blocks)
    # ... and the rest form a set (scattering a repeated id twice is the same as once).
    selected = torch.zeros(*ids.shape[:2], num_blocks + 1, dtype=torch.bool, device=ids.device)
    selected.scatter_(-1, torch.where(valid, ids, num_blocks), True)
    return selected[..., :num_blocks]


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
