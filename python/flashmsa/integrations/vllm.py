"""vLLM's MiniMax-M3 sparse-attention ops, run by flashmsa.

vLLM (vllm/models/minimax_m3/common/ops/sparse_attn.py) runs MiniMax-M3's block-sparse GQA
attention through two Triton ops; the functions here take the same arguments, in the same order
with the same defaults, and write the same `output` in place:

    minimax_m3_sparse_attn(q, kv_cache, topk_idx, block_table, cu_seqlens_q, seq_lens,
                           prefix_lens, max_query_len, num_kv_heads, sm_scale, output,
                           k_scale=None, v_scale=None)
    minimax_m3_sparse_attn_decode(q, kv_cache, topk_idx, block_table, seq_lens, num_kv_heads,
                                  sm_scale, output, decode_query_len, k_scale=None,
                                  v_scale=None, query_start_loc=None, token_to_req_indices=None)

so an engine switches by changing the import. Both return `output` (vLLM's return None).
This is vLLM's version with the packed cache, fp8 scales and ragged decode; earlier versions
took a (num_blocks, 2, 128, num_kv_heads, head_dim) cache, which these functions do not accept.

How they map onto `flashmsa.msa_sparse_attention` (shared/spec/msa_sparse_attention.md):

- the packed cache `(num_blocks, num_kv_heads, 128, 2 * head_dim)` (K in `[..., :head_dim]`, V in
  `[..., head_dim:]`) is passed as its two halves, `kv_cache[..., :D]` and `kv_cache[..., D:]`:
  views, never copies. One vLLM block is one flashmsa page, so `block_table` is the page table
  and `seq_lens` is `seqused_k`;
- causal attention at vLLM's positions: query `i` of a prefill request sits at
  `prefix_lens[b] + i` (passed as the `q_offset` tensor), a decode query at
  `seq_lens[b] - query_len[b] + i` (flashmsa's end-aligned default);
- `sm_scale` is `softmax_scale`; vLLM's base-2 softmax with `sm_scale * log2(e)` is the same
  function as flashmsa's natural-base one;
- fp8 caches: a one-element `k_scale` / `v_scale` tensor is passed, on the device, as
  `k_global_scale` / `v_global_scale`, so a CUDA graph replays with the value the tensor holds
  at replay time. `(num_kv_heads, max_kv_tokens)` per-(KV head, token slot) scales, whose slot
  `block * 128 + token in block` is flashmsa's per-token slot, are passed as they are as
  flashmsa's fp8 `k_scale` / `v_scale`;
- which of a row's `topk` entries it reads (vLLM: the first min(topk, p // 128 + 1), p its
  position) is flashmsa's `causal_entry_limit=True`, applied by the kernels' planning.

Nothing reads a device tensor on the host, and with int32 metadata (vLLM's) a call launches
the attention alone: no copy of `topk_idx`, no position arithmetic. Another integer dtype is
converted on the device (a small kernel; no synchronisation, capturable in a CUDA graph).
"""
import torch

from ..api import BLOCK_SIZE, msa_sparse_attention

__all__ = ["minimax_m3_sparse_attn", "minimax_m3_sparse_attn_decode"]

# The fp8 dtypes vLLM's kernels take as a cache dtype (it converts them to q's dtype on load);
# flashmsa reads float8_e4m3fn.
_VLLM_FP8_DTYPES = tuple(getattr(torch, name) for name in (
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz") if hasattr(torch, name))
_INTEGER_DTYPES = (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8)


# ---------------------------------------------------------------------------------------------
# Argument checks under vLLM's argument names. Like flashmsa's, they read metadata only.
# ---------------------------------------------------------------------------------------------

def _require_tensor(name, value):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _int32_metadata(name, tensor, shape, meaning, device):
    """An index or length tensor of vLLM's as flashmsa reads it: int32 on q's device, and (for
    vectors) contiguous. vLLM's kernels load any integer dtype, so another integer dtype, or a
    strided vector, is converted on the device (a few bytes; no synchronisation)."""
    _require_tensor(name, tensor)
    if tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device}, expected q's device {device}")
    if tensor.dtype not in _INTEGER_DTYPES:
        raise ValueError(f"{name} must have an integer dtype (int32), got "
                         f"{_dtype_name(tensor.dtype)}")
    if tensor.dim() != len(shape) or any(want is not None and got != want
                                         for got, want in zip(tensor.shape, shape)):
        raise ValueError(f"{name} must have shape {meaning}, got {tuple(tensor.shape)}")
    tensor = tensor.to(torch.int32)
    return tensor.contiguous() if tensor.dim() == 1 else tensor


def _packed_cache_halves(kv_cache, q, num_kv_heads):
    """K and V as the two halves of vLLM's packed cache, views that share its storage."""
    _require_tensor("kv_cache", kv_cache)
    head_dim = q.shape[-1]
    expected = (f"(num_blocks, num_kv_heads={num_kv_heads}, {BLOCK_SIZE}, "
                f"2 * head_dim={2 * head_dim})")
    if (kv_cache.dim() != 4 or kv_cache.shape[1] != num_kv_heads
            or kv_cache.shape[2] != BLOCK_SIZE or kv_cache.shape[3] != 2 * head_dim):
        raise ValueError(f"kv_cache must be vLLM's packed K|V cache {expected}, "
                         f"got shape {tuple(kv_cache.shape)}")
    if kv_cache.stride(3) != 1:
        raise ValueError("kv_cache must have a contiguous last dim (stride 1), got strides "
                         f"{tuple(kv_cache.stride())}")
    if kv_cache.dtype in _VLLM_FP8_DTYPES and kv_cache.dtype != torch.float8_e4m3fn:
        raise NotImplementedError(
            f"a {_dtype_name(kv_cache.dtype)} kv_cache is not supported: flashmsa reads fp8 caches "
            "in float8_e4m3fn, and bf16 / fp16 caches in q's dtype")
    if kv_cache.dtype not in (q.dtype, torch.float8_e4m3fn):
        # uint8 included: vLLM's kernels take fp8 caches only as an fp8 dtype (view the bytes).
        raise ValueError(f"kv_cache must have q's dtype ({_dtype_name(q.dtype)}) or float8_e4m3fn, "
                         f"got {_dtype_name(kv_cache.dtype)}")
    return kv_cache[..., :head_dim], kv_cache[..., head_dim:]


def _check_q(q):
    _require_tensor("q", q)
    if q.dim() != 3:
        raise ValueError(f"q must be 3-D (total_q, num_heads, head_dim), got shape "
                         f"{tuple(q.shape)}")


def _check_num_kv_heads(num_kv_heads, q):
    if isinstance(num_kv_heads, bool) or not isinstance(num_kv_heads, int):
        raise TypeError(f"num_kv_heads must be an int, got {type(num_kv_heads).__name__}")
    if num_kv_heads < 1 or q.shape[1] % num_kv_heads != 0:
        raise ValueError(f"num_kv_heads ({num_kv_heads}) must divide q's num_heads ({q.shape[1]})")


def _device_scalar(tensor):
    """A one-element scale as flashmsa's device-resident global scale: float32 of shape (). A
    view when it is float32 already; otherwise converted on the device, which a CUDA graph
    captures too, so replays still read the tensor's current value."""
    return tensor.reshape(()).to(torch.float32)


def _fp8_scales(kv_cache, k_scale, v_scale, num_kv_heads, device):
    """vLLM's k_scale / v_scale as msa_sparse_attention's scale arguments (a dict of them).

    As in vLLM, scales only apply to fp8 caches (a bf16 / fp16 cache ignores them), must be
    given together, and live on the output's device. A one-element tensor is one scale for the
    whole cache: k_global_scale / v_global_scale, on the device. (num_kv_heads, max_kv_tokens)
    tensors are per-(KV head, token slot) scales, slot block * 128 + token in block, which is
    flashmsa's per-token slot p * 128 + t: they are passed as they are, as fp8 k_scale /
    v_scale (float32, last dim contiguous, at least num_blocks * 128 slots; flashmsa checks).
    """
    if kv_cache.dtype not in _VLLM_FP8_DTYPES or (k_scale is None and v_scale is None):
        return {}
    if k_scale is None or v_scale is None:
        raise ValueError("k_scale and v_scale must be both given or both None")
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        _require_tensor(name, scale)
        if scale.device != device:
            raise ValueError(f"{name} is on {scale.device}, expected the device of output, "
                             f"{device}")
    if k_scale.numel() == 1 and v_scale.numel() == 1:
        return dict(k_global_scale=_device_scalar(k_scale),
                    v_global_scale=_device_scalar(v_scale))
    if k_scale.dim() == 2 and v_scale.dim() == 2:
        if k_scale.shape[0] != num_kv_heads or v_scale.shape[0] != num_kv_heads:
            raise ValueError(f"per-token k_scale / v_scale must have shape ({num_kv_heads}, "
                             f"max_kv_tokens), got {tuple(k_scale.shape)} and "
                             f"{tuple(v_scale.shape)}")
        if k_scale.shape != v_scale.shape:
            raise ValueError(f"k_scale and v_scale must have the same shape, got "
                             f"{tuple(k_scale.shape)} and {tuple(v_scale.shape)}")
        for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
            # Converting would copy a cache-sized tensor on every call.
            if scale.dtype != torch.float32:
                raise ValueError(f"per-token {name} must be float32, got "
                                 f"{_dtype_name(scale.dtype)}")
        return dict(k_scale=k_scale, v_scale=v_scale)
    raise ValueError("k_scale / v_scale must be one-element tensors or (num_kv_heads, "
                     f"max_kv_tokens) tensors, got shapes {tuple(k_scale.shape)} and "
                     f"{tuple(v_scale.shape)}")


def _check_output(output, q):
    _require_tensor("output", output)
    if tuple(output.shape) != tuple(q.shape):
        raise ValueError(f"output must have q's shape (total_q, num_heads, head_dim) = "
                         f"{tuple(q.shape)}, got {tuple(output.shape)}")
    if output.dtype != q.dtype or output.device != q.device:
        raise ValueError(f"output must be {_dtype_name(q.dtype)} on {q.device} like q, got "
                         f"{_dtype_name(output.dtype)} on {output.device}")


def _topk_rows(topk_idx, num_kv_heads, total_q):
    """topk_idx (num_kv_heads, >= total_q, topk) -> its first total_q rows as int32: a view of
    an int32 tensor (vLLM's kernels read only those rows); another integer dtype is converted on
    the device, wrapping an int64 id as vLLM's .to(tl.int32) does. Which entries of a row are
    read, vLLM's rule, is the kernels' causal entry limit (causal_entry_limit=True): entry c is
    read iff 128 * c <= p, p the row's position."""
    _require_tensor("topk_idx", topk_idx)
    if (topk_idx.dim() != 3 or topk_idx.shape[0] != num_kv_heads
            or topk_idx.shape[1] < total_q):
        raise ValueError(f"topk_idx must have shape (num_kv_heads, total_q, topk) = "
                         f"({num_kv_heads}, {total_q}, topk), got {tuple(topk_idx.shape)}")
    if topk_idx.dtype not in _INTEGER_DTYPES:
        raise ValueError(f"topk_idx must have an integer dtype (int32), got "
                         f"{_dtype_name(topk_idx.dtype)}")
    return topk_idx[:, :total_q].to(torch.int32)


def _block_table_rows(block_table, num_requests, device):
    """block_table (>= num_requests, max_blocks) -> its first num_requests rows as int32."""
    block_table = _int32_metadata("block_table", block_table, (None, None),
                                  "(num_requests, max_blocks)", device)
    if block_table.shape[0] < num_requests:
        raise ValueError(f"block_table must have a row per request ({num_requests}), got shape "
                         f"{tuple(block_table.shape)}")
    return block_table[:num_requests]


# ---------------------------------------------------------------------------------------------
# The metadata of uniform decode batches.
# ---------------------------------------------------------------------------------------------

# cu_seqlens_q of a uniform decode batch (0, n, 2n, ...): a view of one cached vector per
# (device, n), so that a replayed decode step runs no kernel to make it. The cache grows only
# outside CUDA-graph capture; a capture that needs more than it holds makes its own vector
# (one small kernel in that graph).
_UNIFORM_STARTS = {}
_UNIFORM_STARTS_MIN_LENGTH = 4097


def _uniform_query_starts(num_reqs, query_len, device):
    starts = _UNIFORM_STARTS.get((device, query_len))
    if starts is None or starts.shape[0] < num_reqs + 1:
        length = max(num_reqs + 1, _UNIFORM_STARTS_MIN_LENGTH)
        if (length - 1) * query_len >= 2 ** 31:
            length = num_reqs + 1  # the caller's total_q fits int32; a longer vector might not
        fresh = torch.arange(0, length * query_len, query_len, dtype=torch.int32, device=device)
        capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        if capturing:
            return fresh[:num_reqs + 1]
        _UNIFORM_STARTS[(device, query_len)] = starts = fresh
    return starts[:num_reqs + 1]


def _cache_and_scales(q, kv_cache, num_kv_heads, output, k_scale, v_scale):
    """The checks both ops start with; returns the cache's K and V halves and flashmsa's scale
    arguments."""
    _check_q(q)
    _check_num_kv_heads(num_kv_heads, q)
    _check_output(output, q)
    k, v = _packed_cache_halves(kv_cache, q, num_kv_heads)
    return k, v, _fp8_scales(kv_cache, k_scale, v_scale, num_kv_heads, output.device)


def _no_requests(output):
    # With no request every row is padding; padded rows get 0 (see the docstrings).
    return output.zero_()


@torch.no_grad()
def minimax_m3_sparse_attn(q, kv_cache, topk_idx, block_table, cu_seqlens_q, seq_lens,
                           prefix_lens, max_query_len, num_kv_heads, sm_scale, output,
                           k_scale=None, v_scale=None, *, workspace=None):
    """vLLM's MiniMax-M3 prefill sparse attention (`minimax_m3_sparse_attn`), run by flashmsa.

    Arguments, as in vLLM:
        q: (total_q, num_heads, head_dim) bf16 or fp16, the queries of all requests.
        kv_cache: (num_blocks, num_kv_heads, 128, 2 * head_dim), K in [..., :head_dim] and V in
            [..., head_dim:]; q's dtype or float8_e4m3fn. Read in place.
        topk_idx: (num_kv_heads, total_q, topk) int, each row's selected blocks (request-local
            block ids, 128 tokens each), as vLLM's indexer writes them.
        block_table: (batch, max_blocks) int, the cache block of each request block.
        cu_seqlens_q: (batch + 1,) int, prefix sums of the query lengths.
        seq_lens: (batch,) int, each request's KV length (cached prefix plus this chunk).
        prefix_lens: (batch,) int, each request's tokens before this chunk: query i of request
            b sits at position prefix_lens[b] + i (chunked prefill).
        max_query_len: the longest query length: only sizes vLLM's launch grid; flashmsa
            computes every row without it (it must still be at least every query length).
        num_kv_heads: kv_cache.shape[1].
        sm_scale: the softmax scale (vLLM has no default; head_dim ** -0.5 for MiniMax-M3).
        output: (total_q, num_heads, head_dim) in q's dtype, written in place and returned.
        k_scale, v_scale: for an fp8 cache, None (no scale) or one-element tensors on the
            output's device, the cache's dequantisation scales; ignored for a bf16/fp16 cache,
            as in vLLM; or (num_kv_heads, max_kv_tokens) float32 per-(KV head, token slot)
            scales, slot = cache block * 128 + token in block, read in place.
        workspace (keyword only, not vLLM's): a flashmsa.MSASparseAttentionWorkspace.

    Follows vLLM: query i of request b reads, per KV head h, the keys c of the blocks in the
    first min(topk, pos // 128 + 1) entries of topk_idx[h, row] (pos = prefix_lens[b] + i) with
    c < seq_lens[b] and c <= pos; entries past those are not read, whatever they hold
    (flashmsa's causal_entry_limit).

    Differs from vLLM, only where vLLM's result is undefined or its kernel misbehaves:
    - within the entries read: a negative id ends the row (vLLM's kernel would look it up in
      block_table, out of bounds); a repeated id counts once (vLLM's kernel would add its block
      twice); a block with no visible key adds nothing even when it is read first (vLLM's
      kernel makes NaN then). vLLM's indexer writes distinct visible blocks, the query's own
      among them, and -1 only after the entries read, so on its output the two agree;
    - rows outside every request (past cu_seqlens_q[-1]) are written with 0; vLLM's kernel
      leaves them as they were. A row that reads no key gets 0 (vLLM's gets NaN);
    - fp8: vLLM rounds k * k_scale and v * v_scale to q's dtype before its dot products; flashmsa
      applies the scales in fp32 to the scores and to the output (contract section 6): results
      differ by rounding only.
    """
    k, v, scales = _cache_and_scales(q, kv_cache, num_kv_heads, output, k_scale, v_scale)
    device = q.device
    total_q = q.shape[0]
    cu_seqlens_q = _int32_metadata("cu_seqlens_q", cu_seqlens_q, (None,), "(batch + 1,)", device)
    batch = cu_seqlens_q.shape[0] - 1
    if batch < 1:
        return _no_requests(output)
    seq_lens = _int32_metadata("seq_lens", seq_lens, (batch,), f"(batch,) = ({batch},)", device)
    prefix_lens = _int32_metadata("prefix_lens", prefix_lens, (batch,), f"(batch,) = ({batch},)",
                                  device)
    block_table = _block_table_rows(block_table, batch, device)
    topk_idx = _topk_rows(topk_idx, num_kv_heads, total_q)

    return msa_sparse_attention(
        q, k, v, topk_idx, cu_seqlens_q, causal=True,
        softmax_scale=float(sm_scale), page_table=block_table, seqused_k=seq_lens,
        q_offset=prefix_lens, workspace=workspace, out=output, causal_entry_limit=True,
        **scales)


@torch.no_grad()
def minimax_m3_sparse_attn_decode(q, kv_cache, topk_idx, block_table, seq_lens, num_kv_heads,
                                  sm_scale, output, decode_query_len, k_scale=None, v_scale=None,
                                  query_start_loc=None, token_to_req_indices=None, *,
                                  workspace=None):
    """vLLM's MiniMax-M3 decode sparse attention (`minimax_m3_sparse_attn_decode`), run by
    flashmsa.

    Arguments, as in vLLM (q, kv_cache, topk_idx, num_kv_heads, sm_scale, output, k_scale,
    v_scale and workspace as for `minimax_m3_sparse_attn`):
        block_table: (num_reqs, max_blocks) int.
        seq_lens: (num_reqs,) int, each request's KV length, its new tokens included.
        decode_query_len: the query tokens of every request (1, or more with multi-token
            prediction) when query_start_loc is None: then total_q == num_reqs *
            decode_query_len and request r owns rows [r * decode_query_len, (r + 1) *
            decode_query_len).
        query_start_loc: (num_reqs + 1,) int, ragged batches: request r owns rows
            [query_start_loc[r], query_start_loc[r + 1]); rows past query_start_loc[-1] are
            padding. decode_query_len is then not used.
        token_to_req_indices: (>= total_q,) int, each row's request; required with
            query_start_loc, as in vLLM. flashmsa finds each row's request from query_start_loc,
            so this must agree with it (vLLM's metadata builder makes them agree); only its
            shape is checked.

    Follows vLLM: query i of request r (query length n) sits at position
    p = seq_lens[r] - n + i; it reads, per KV head h, the keys c < p + 1 of the blocks in the
    first min(topk, ceil((p + 1) / 128)) entries of topk_idx[h, row], and nothing when p < 0
    (CUDA-graph padding requests have seq_lens 0). Entries past those are not read, whatever
    they hold (flashmsa's causal_entry_limit).

    Differs from vLLM, only where vLLM's result is undefined or its kernel misbehaves:
    - within the entries read, as for prefill: a negative id ends the row, a repeated id
      counts once, and a block with no visible key adds nothing (vLLM's split-K kernel makes
      NaN when such a block starts one of its chunks);
    - padded rows (rows past query_start_loc[-1], rows of zero-length or padding requests, any
      row that reads no key) are written with 0; vLLM's split-K merge leaves NaN in them;
    - fp8 scales apply in fp32 (as for prefill).
    """
    k, v, scales = _cache_and_scales(q, kv_cache, num_kv_heads, output, k_scale, v_scale)
    device = q.device
    total_q = q.shape[0]
    _require_tensor("seq_lens", seq_lens)
    if seq_lens.dim() != 1:
        raise ValueError(f"seq_lens must have shape (num_reqs,), got {tuple(seq_lens.shape)}")
    num_reqs = seq_lens.shape[0]
    seq_lens = _int32_metadata("seq_lens", seq_lens, (num_reqs,), "(num_reqs,)", device)

    if query_start_loc is not None:
        if token_to_req_indices is None:
            raise ValueError("token_to_req_indices is required with query_start_loc")
        cu_seqlens_q = _int32_metadata("query_start_loc", query_start_loc, (num_reqs + 1,),
                                       f"(num_reqs + 1,) = ({num_reqs + 1},)", device)
        _require_tensor("token_to_req_indices", token_to_req_indices)
        if token_to_req_indices.dim() != 1 or token_to_req_indices.shape[0] < total_q:
            raise ValueError(f"token_to_req_indices must have shape (>= total_q,) with total_q = "
                             f"{total_q}, got {tuple(token_to_req_indices.shape)}")
    else:
        if isinstance(decode_query_len, bool) or not isinstance(decode_query_len, int):
            raise TypeError(f"decode_query_len must be an int, got "
                            f"{type(decode_query_len).__name__}")
        if decode_query_len < 1 or total_q != num_reqs * decode_query_len:
            raise ValueError(f"q's total_q ({total_q}) must be num_reqs ({num_reqs}) * "
                             f"decode_query_len ({decode_query_len}) without query_start_loc")
        cu_seqlens_q = _uniform_query_starts(num_reqs, decode_query_len, device)
    if num_reqs < 1:
        return _no_requests(output)
    block_table = _block_table_rows(block_table, num_reqs, device)
    topk_idx = _topk_rows(topk_idx, num_kv_heads, total_q)

    # q_offset=None: flashmsa's end-aligned positions, seq_lens[r] - query_len[r] + i, are vLLM's.
    return msa_sparse_attention(
        q, k, v, topk_idx, cu_seqlens_q, causal=True,
        softmax_scale=float(sm_scale), page_table=block_table, seqused_k=seq_lens,
        workspace=workspace, out=output, causal_entry_limit=True, **scales)
