"""flashmsa.msa_sparse_attention: validation, output allocation, and the torch.library op.

The public function checks everything the contract's section 8 lists from tensor metadata alone
(so it traces under torch.compile), allocates the outputs, and calls the custom op
flashmsa::msa_sparse_attention. The op's implementation fills the C argument struct, checks
what this build and device support, takes scratch memory and calls the library.
"""
import math
from typing import Optional

import torch

from . import _lib
from .testing import launch_overrides_in_effect
from .workspace import MSASparseAttentionWorkspace, find_workspace

HEAD_DIM = 128  # the only head_dim supported so far
BLOCK_SIZE = 128  # tokens per selectable block = page size
MAX_TOPK = 64
NVFP4_BLOCK = 16  # elements sharing one E4M3 scale

_Q_DTYPES = {torch.bfloat16: _lib.DTYPE_BF16, torch.float16: _lib.DTYPE_FP16}


# ---------------------------------------------------------------------------------------------
# Argument checks. Each raises the contract's exception with the argument's name and what was
# expected; none reads tensor data, so none synchronises with a device.
# ---------------------------------------------------------------------------------------------

def _describe_dtypes(dtypes):
    return " or ".join(str(dtype).replace("torch.", "") for dtype in dtypes)


def _require_tensor(name, value):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")


def _optional_tensor(name, value):
    if value is not None:
        _require_tensor(name, value)


def _check_dtype(name, tensor, allowed):
    if tensor.dtype not in allowed:
        raise ValueError(f"{name} must have dtype {_describe_dtypes(allowed)}, "
                         f"got {str(tensor.dtype).replace('torch.', '')}")


def _check_shape(name, tensor, expected, meaning):
    if tuple(tensor.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {meaning} = {tuple(expected)}, "
                         f"got {tuple(tensor.shape)}")


def _check_rank(name, tensor, rank, meaning):
    if tensor.dim() != rank:
        raise ValueError(f"{name} must be {rank}-D {meaning}, got shape {tuple(tensor.shape)}")


def _check_device(name, tensor, device):
    if tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device}, expected q's device {device}")


def _check_last_dim_contiguous(name, tensor):
    if tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous last dim (stride 1), "
                         f"got strides {tuple(tensor.stride())}")


def _check_contiguous(name, tensor):
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {tuple(tensor.stride())}")


def _check_int_vector(name, tensor, length, meaning, device):
    """An int32 vector read through a plain pointer (cu_seqlens, seqused_k, q_offset)."""
    _check_device(name, tensor, device)
    _check_dtype(name, tensor, (torch.int32,))
    _check_shape(name, tensor, (length,), meaning)
    _check_contiguous(name, tensor)


def _scalar(name, value, default):
    """A scale given as a Python number or a one-element CPU tensor -> finite float."""
    if value is None:
        return default
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a float, got bool")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a float or a one-element tensor, "
                             f"got shape {tuple(value.shape)}")
        if value.device.type != "cpu":
            # Reading it would synchronise the host with the device.
            raise ValueError(f"{name} must be a float (or a CPU tensor), got a tensor on "
                             f"{value.device}: pass float(scale)")
        value = value.item()
    if not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def _global_scale(name, value, device):
    """k_global_scale / v_global_scale (section 6) -> (the float for the call, the tensor or None).

    A number is checked like any scale. A one-element float32 tensor on q's device is read by
    the backend where it lies, never copied to the host, so that a captured CUDA graph replays
    with the value the tensor holds at replay time; the float is then the neutral 1. Its value
    is not checked (that would need a host read).
    """
    if not isinstance(value, torch.Tensor):
        return _scalar(name, value, 1.0), None
    if (value.dtype != torch.float32 or value.numel() != 1 or value.dim() > 1
            or value.device != device):
        raise ValueError(
            f"{name} must be a float or a one-element float32 tensor of shape () or (1,) on q's "
            f"device {device}, got a {str(value.dtype).replace('torch.', '')} tensor of shape "
            f"{tuple(value.shape)} on {value.device}")
    return 1.0, value


def _kv_dtypes(q_dtype):
    return (q_dtype, torch.float8_e4m3fn, torch.uint8)


def _nvfp4_scales_are_page_local(k_scale, v_scale, paged):
    """The form of the NVFP4 scales (section 6): rank 1 or 2 is the swizzled 128x4 table, rank 4
    the page-local planes, which only paged K/V take. Both tensors take the same form."""
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        if scale.dim() not in (1, 2, 4):
            raise ValueError(f"{name} must be 1-D or 2-D (swizzled 128x4 scale bytes) or 4-D "
                             "(page-local, (num_pages, num_kv_heads, 128, head_dim // 16)), got "
                             f"shape {tuple(scale.shape)}")
    page_local = k_scale.dim() == 4
    if (v_scale.dim() == 4) != page_local:
        raise ValueError(f"v_scale must take k_scale's form (both 4-D page-local, or both 1-D or "
                         f"2-D swizzled), got k_scale shape {tuple(k_scale.shape)} and v_scale "
                         f"shape {tuple(v_scale.shape)}")
    if page_local and not paged:
        raise ValueError("k_scale is 4-D (page-local NVFP4 scales), which needs paged K/V "
                         "(page_table): flat K/V take the swizzled 128x4 form (1-D or 2-D)")
    return page_local


def _check_page_and_head_strides(name, tensor):
    """Page-local NVFP4: the page and head strides are free, in multiples of 16 bytes (one byte
    per element here). A dimension of one entry is never stepped over: its stride is free."""
    for dim, what in ((0, "page"), (1, "head")):
        if tensor.shape[dim] > 1 and tensor.stride(dim) % 16 != 0:
            raise ValueError(f"{name} must have a {what} stride (dim {dim}) that is a multiple of "
                             "16 bytes with page-local NVFP4 scales, got strides "
                             f"{tuple(tensor.stride())}")


def _check_page_local_scales(k, v, k_scale, v_scale, head_dim):
    """Page-local NVFP4 (section 6): scales (num_pages, Hkv, 128, D // 16), each (page, head)
    plane contiguous; K/V rows D // 2 bytes apart within a page."""
    scale_cols = head_dim // NVFP4_BLOCK
    num_pages, num_kv_heads = k.shape[:2]
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        _check_shape(name, scale, (num_pages, num_kv_heads, BLOCK_SIZE, scale_cols),
                     "(k's num_pages, num_kv_heads, 128, head_dim // 16) for page-local scales")
        if scale.stride(3) != 1 or scale.stride(2) != scale_cols:
            raise ValueError(f"{name} must have each (page, KV head) plane of 128 x {scale_cols} "
                             f"scale bytes contiguous (token stride {scale_cols}, last stride 1), "
                             f"got strides {tuple(scale.stride())}")
        _check_page_and_head_strides(name, scale)
    for name, tensor in (("k", k), ("v", v)):
        if tensor.stride(2) != head_dim // 2:
            raise ValueError(f"{name} must have token stride (dim 2) head_dim // 2 = "
                             f"{head_dim // 2} with page-local NVFP4 scales (4-D k_scale / "
                             f"v_scale), got strides {tuple(tensor.stride())}")
        _check_page_and_head_strides(name, tensor)


def _check_token_scales(k, k_scale, v_scale, paged, num_kv_heads, device):
    """Per-token fp8 scales (docs/contract.md section 6, this project's extension): float32
    (Hkv, num_slots) on q's device, last dim contiguous, at least one slot per cache token
    (paged: num_pages * 128, slot p * 128 + t; flat: total_k, slot r). Either may be None."""
    needed = k.shape[0] * BLOCK_SIZE if paged else k.shape[0]
    slots_meaning = "k's num_pages * 128" if paged else "k's total_k"
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        if scale is None:
            continue
        _check_device(name, scale, device)
        if scale.dtype != torch.float32:
            raise ValueError(f"{name} for float8_e4m3fn K/V must be float32 per-token scales "
                             f"(num_kv_heads, num_slots), got dtype "
                             f"{str(scale.dtype).replace('torch.', '')}")
        _check_rank(name, scale, 2, "(num_kv_heads, num_slots) per-token scales for "
                    "float8_e4m3fn K/V")
        if scale.shape[0] != num_kv_heads:
            raise ValueError(f"{name} must have num_kv_heads = {num_kv_heads} rows (dim 0), "
                             f"got shape {tuple(scale.shape)}")
        if scale.shape[1] < needed:
            raise ValueError(f"{name} must have at least {slots_meaning} = {needed} token slots "
                             f"(dim 1), got shape {tuple(scale.shape)}")
        _check_last_dim_contiguous(name, scale)
        # Rows of one head must not overlap the next (an expanded tensor would alias them).
        if num_kv_heads > 1 and scale.stride(0) < scale.shape[1]:
            raise ValueError(f"{name} must have a row stride (dim 0) of at least its "
                             f"{scale.shape[1]} slots, got strides {tuple(scale.stride())}")


def _validate(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k, page_table, seqused_k, k_scale,
              v_scale, q_offset, workspace, out):
    """Checks of section 8 on metadata only. Returns q_offset split for the op's schema:
    (the int or None, the tensor or None)."""
    for name, value in (("q", q), ("k", k), ("v", v), ("q2k_indices", q2k_indices),
                        ("cu_seqlens_q", cu_seqlens_q)):
        _require_tensor(name, value)
    for name, value in (("cu_seqlens_k", cu_seqlens_k), ("page_table", page_table),
                        ("seqused_k", seqused_k), ("k_scale", k_scale), ("v_scale", v_scale),
                        ("out", out)):
        _optional_tensor(name, value)
    if workspace is not None and not isinstance(workspace, MSASparseAttentionWorkspace):
        raise TypeError("workspace must be a flashmsa.MSASparseAttentionWorkspace, "
                        f"got {type(workspace).__name__}")
    if q_offset is not None and (isinstance(q_offset, bool)
                                 or not isinstance(q_offset, (int, torch.Tensor))):
        raise TypeError(f"q_offset must be an int or an int32 tensor, got {type(q_offset).__name__}")

    device = q.device
    if device.type not in ("cpu", "cuda"):
        raise NotImplementedError(f"flashmsa runs on CPU and CUDA tensors, q is on {device}")

    # q
    _check_dtype("q", q, tuple(_Q_DTYPES))
    _check_rank("q", q, 3, "(total_q, num_qo_heads, head_dim)")
    _check_last_dim_contiguous("q", q)
    total_q, num_qo_heads, head_dim = q.shape

    # k, v
    paged = page_table is not None
    for name, tensor in (("k", k), ("v", v)):
        _check_device(name, tensor, device)
        _check_dtype(name, tensor, _kv_dtypes(q.dtype))
        if paged:
            _check_rank(name, tensor, 4, "(num_pages, num_kv_heads, 128, head_dim) with page_table")
        else:
            _check_rank(name, tensor, 3, "(total_k, num_kv_heads, head_dim) without page_table")
        _check_last_dim_contiguous(name, tensor)
    if v.dtype != k.dtype:
        raise ValueError(f"v must have k's dtype {k.dtype}, got {v.dtype}")
    if v.shape != k.shape:
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    nvfp4 = k.dtype == torch.uint8
    stored_dim = head_dim // 2 if nvfp4 else head_dim
    if k.shape[-1] != stored_dim:
        what = "head_dim / 2 (packed NVFP4)" if nvfp4 else "head_dim"
        raise ValueError(f"k's last dim must be {what} = {stored_dim} for q's head_dim "
                         f"{head_dim}, got {k.shape[-1]}")
    if paged and k.shape[2] != BLOCK_SIZE:
        raise ValueError(f"paged k must have {BLOCK_SIZE} tokens per page (dim 2), got {k.shape[2]}")
    num_kv_heads = k.shape[1]
    if num_kv_heads < 1 or num_qo_heads % num_kv_heads != 0:
        raise ValueError(f"q's num_qo_heads ({num_qo_heads}) must be a multiple of k's "
                         f"num_kv_heads ({num_kv_heads})")
    if head_dim != HEAD_DIM:
        raise NotImplementedError(f"head_dim {head_dim} is not supported: flashmsa supports "
                                  f"head_dim {HEAD_DIM}")

    # q2k_indices
    _check_device("q2k_indices", q2k_indices, device)
    _check_dtype("q2k_indices", q2k_indices, (torch.int32,))
    _check_rank("q2k_indices", q2k_indices, 3, "(num_kv_heads, total_q, topk)")
    if tuple(q2k_indices.shape[:2]) != (num_kv_heads, total_q):
        raise ValueError(f"q2k_indices must have shape (num_kv_heads, total_q, topk) = "
                         f"({num_kv_heads}, {total_q}, topk), got {tuple(q2k_indices.shape)}")
    topk = q2k_indices.shape[2]
    if not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"q2k_indices' topk (last dim) must be in [1, {MAX_TOPK}], got {topk}")

    # Sequence metadata
    _check_device("cu_seqlens_q", cu_seqlens_q, device)
    _check_dtype("cu_seqlens_q", cu_seqlens_q, (torch.int32,))
    _check_rank("cu_seqlens_q", cu_seqlens_q, 1, "(batch_size + 1,)")
    if cu_seqlens_q.shape[0] < 2:
        raise ValueError(f"cu_seqlens_q must have batch_size + 1 >= 2 entries, "
                         f"got shape {tuple(cu_seqlens_q.shape)}")
    _check_contiguous("cu_seqlens_q", cu_seqlens_q)
    batch_size = cu_seqlens_q.shape[0] - 1
    if paged:
        if cu_seqlens_k is not None:
            raise ValueError("cu_seqlens_k must be None with page_table (paged K/V): "
                             "give seqused_k instead")
        if seqused_k is None:
            raise ValueError("seqused_k is required with page_table (paged K/V)")
        _check_device("page_table", page_table, device)
        _check_dtype("page_table", page_table, (torch.int32,))
        _check_rank("page_table", page_table, 2, "(batch_size, max_pages)")
        if page_table.shape[0] != batch_size:
            raise ValueError(f"page_table must have batch_size = {batch_size} rows, "
                             f"got shape {tuple(page_table.shape)}")
        _check_int_vector("seqused_k", seqused_k, batch_size, "(batch_size,)", device)
    else:
        if cu_seqlens_k is None:
            raise ValueError("cu_seqlens_k is required for flat K/V (no page_table)")
        if seqused_k is not None:
            raise ValueError("seqused_k is only used with page_table (paged K/V); flat K/V "
                             "take their lengths from cu_seqlens_k")
        _check_int_vector("cu_seqlens_k", cu_seqlens_k, batch_size + 1, "(batch_size + 1,)",
                          device)

    # NVFP4 block scales
    if nvfp4:
        for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
            if scale is None:
                raise ValueError(f"{name} is required for NVFP4 (uint8) K/V: the E4M3 block "
                                 "scales, swizzled 128x4 (1-D or 2-D) or page-local (4-D)")
            _check_device(name, scale, device)
            _check_dtype(name, scale, (torch.uint8, torch.float8_e4m3fn))
        if _nvfp4_scales_are_page_local(k_scale, v_scale, paged):
            _check_page_local_scales(k, v, k_scale, v_scale, head_dim)
        else:
            rows = k.shape[0] * num_kv_heads * (BLOCK_SIZE if paged else 1)
            needed = -(-rows // BLOCK_SIZE) * BLOCK_SIZE * (head_dim // NVFP4_BLOCK)
            for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
                _check_contiguous(name, scale)
                if scale.numel() < needed:
                    raise ValueError(f"{name} must hold at least ceil({rows} / 128) * 128 * "
                                     f"{head_dim // NVFP4_BLOCK} = {needed} bytes, "
                                     f"got {scale.numel()}")
    elif k.dtype == torch.float8_e4m3fn:
        _check_token_scales(k, k_scale, v_scale, paged, num_kv_heads, device)
    else:
        for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
            if scale is not None:
                raise ValueError(f"{name} is only for NVFP4 (uint8) K/V (block scales) and "
                                 "float8_e4m3fn K/V (per-token scales); k is "
                                 f"{str(k.dtype).replace('torch.', '')}: use k_global_scale / "
                                 "v_global_scale for per-tensor scales")

    # q_offset
    q_offset_value, q_offset_tensor = None, None
    if isinstance(q_offset, torch.Tensor):
        _check_int_vector("q_offset", q_offset, batch_size, "(batch_size,)", device)
        q_offset_tensor = q_offset
    elif q_offset is not None:
        if not -(1 << 63) <= q_offset < (1 << 63):
            raise ValueError(f"q_offset must fit in int64, got {q_offset}")
        q_offset_value = q_offset

    # out
    if out is not None:
        _check_device("out", out, device)
        _check_dtype("out", out, (q.dtype,))
        _check_shape("out", out, (total_q, num_qo_heads, head_dim),
                     "(total_q, num_qo_heads, head_dim)")
        _check_last_dim_contiguous("out", out)

    if workspace is not None and workspace.device != device:
        raise ValueError(f"workspace is on {workspace.device}, expected q's device {device}")
    return q_offset_value, q_offset_tensor


def msa_sparse_attention(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k=None, causal=False,
                         softmax_scale=None, page_table=None, seqused_k=None,
                         return_softmax_lse=False, k_scale=None, v_scale=None,
                         k_global_scale=None, v_global_scale=None, q_offset=None,
                         return_temperature_lse=False, lse_temperature_scale=1.0,
                         workspace=None, *, out=None, causal_entry_limit=False):
    """MiniMax Sparse Attention forward (shared/spec/msa_sparse_attention.md).

    Each query row reads, per KV head, the keys of the 128-token blocks that
    q2k_indices[kv_head, row, :] selects (first negative id ends the list, out-of-range ids are
    ignored, repeats count once), causally limited when `causal`.

    Returns out (total_q, Hq, D) in q's dtype; (out, lse) with return_softmax_lse;
    (out, lse, lse_t) with return_temperature_lse. lse and lse_t are float32 (total_q, Hq).
    Pass page_table and seqused_k (and no cu_seqlens_k) for paged K/V. `out=` is written in
    place and returned. k_global_scale / v_global_scale are floats, or one-element float32
    tensors on q's device read in place (CUDA-graph replays use their current values). NVFP4
    k_scale / v_scale are the swizzled 128x4 bytes (1-D or 2-D) or, with paged K/V, page-local
    (num_pages, Hkv, 128, D // 16) views. With float8_e4m3fn K/V, k_scale / v_scale (either or
    both) are per-(KV head, token slot) float32 descales of shape (Hkv, num_slots), last dim
    contiguous: the slot of paged (page p, token t) is p * 128 + t (num_slots >= num_pages *
    128), of flat key row r it is r (num_slots >= total_k), and a key is
    e4m3 * k_scale[h, slot] * k_global_scale (a value likewise), on q's device.

    causal_entry_limit (keyword only, this project's extension; the rule of vLLM's MiniMax-M3
    kernels): with causal, a query at position p reads only the entries c of its index row
    with c * 128 <= p, the first min(topk, p // 128 + 1), whatever the later ones hold (and none
    when p < 0); the first negative entry still ends a row earlier.
    """
    if causal_entry_limit and not causal:
        raise ValueError("causal_entry_limit needs causal=True (the limit follows causal "
                         "positions)")
    q_offset_value, q_offset_tensor = _validate(
        q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k, page_table, seqused_k, k_scale,
        v_scale, q_offset, workspace, out)
    scale = _scalar("softmax_scale", softmax_scale, q.shape[-1] ** -0.5)
    k_scale_global, k_scale_global_tensor = _global_scale("k_global_scale", k_global_scale,
                                                          q.device)
    v_scale_global, v_scale_global_tensor = _global_scale("v_global_scale", v_global_scale,
                                                          q.device)
    temperature = _scalar("lse_temperature_scale", lse_temperature_scale, 1.0)
    if temperature <= 0:
        raise ValueError(f"lse_temperature_scale must be > 0, got {temperature}")

    total_q, num_qo_heads, head_dim = q.shape
    if out is None:
        out = torch.empty(total_q, num_qo_heads, head_dim, dtype=q.dtype, device=q.device)
    want_lse = bool(return_softmax_lse) or bool(return_temperature_lse)
    lse = lse_t = None
    if want_lse:
        lse = torch.empty(total_q, num_qo_heads, dtype=torch.float32, device=q.device)
    if return_temperature_lse:
        lse_t = torch.empty(total_q, num_qo_heads, dtype=torch.float32, device=q.device)

    torch.ops.flashmsa.msa_sparse_attention(
        q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k, page_table, seqused_k,
        k_scale, v_scale, q_offset_tensor, q_offset_value, bool(causal), scale,
        k_scale_global, v_scale_global, temperature,
        workspace.id if workspace is not None else 0, out, lse, lse_t,
        k_scale_global_tensor, v_scale_global_tensor, bool(causal_entry_limit))

    if return_temperature_lse:
        return out, lse, lse_t
    if return_softmax_lse:
        return out, lse
    return out


# ---------------------------------------------------------------------------------------------
# The custom op: what runs eagerly, and what torch.compile sees.
# ---------------------------------------------------------------------------------------------

def _check_supported(q):
    """What this build and device run (section 3): NotImplementedError otherwise."""
    if q.device.type == "cpu":
        return
    if not _lib.has_cuda():
        raise NotImplementedError(
            "this flashmsa build has no CUDA kernels (nvcc was not found when it was built): "
            "CUDA tensors need a build with the sm_90a kernels; CPU tensors run everywhere")
    capability = torch.cuda.get_device_capability(q.device)
    if capability != (9, 0):
        raise NotImplementedError(
            f"flashmsa's CUDA kernels run on compute capability 9.0 (Hopper: H100, H800, H20, "
            f"H200); {torch.cuda.get_device_name(q.device)} is {capability[0]}.{capability[1]}")


def supports_packed_kv(device):
    """Whether K and V given as the two halves of one packed K|V cache (cache[..., :D],
    cache[..., D:]) run on `device`. True on CPU; on CUDA, where this build's kernels run."""
    device = torch.device(device)
    if device.type == "cpu":
        return True
    if device.type != "cuda":
        return False
    return _lib.has_cuda() and torch.cuda.get_device_capability(device) == (9, 0)


def _kv_dtype_code(dtype, q_dtype):
    if dtype == torch.uint8:
        return _lib.DTYPE_NVFP4
    if dtype == torch.float8_e4m3fn:
        return _lib.DTYPE_FP8_E4M3
    return _Q_DTYPES[q_dtype]


def _pointer(tensor):
    return tensor.data_ptr() if tensor is not None else None


def _fill_args(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k, page_table, seqused_k,
               k_scale, v_scale, q_offset_tensor, q_offset_value, causal, softmax_scale,
               k_global_scale, v_global_scale, lse_temperature_scale, out, lse, lse_t,
               k_global_scale_tensor, v_global_scale_tensor, causal_entry_limit=False):
    """The flashmsa_args of one call. Strides are in elements of each tensor's storage type
    (bytes for fp8 and packed NVFP4)."""
    args = _lib.new_args()
    if q.device.type == "cuda":
        args.device = _lib.DEVICE_CUDA
        args.device_index = q.device.index
        args.stream = torch.cuda.current_stream(q.device).cuda_stream
    else:
        args.device = _lib.DEVICE_CPU
    paged = page_table is not None
    args.batch_size = cu_seqlens_q.shape[0] - 1
    args.total_q, args.num_qo_heads, args.head_dim = q.shape
    args.num_kv_heads = q2k_indices.shape[0]
    args.topk = q2k_indices.shape[2]
    args.is_paged = int(paged)
    args.q_dtype = _Q_DTYPES[q.dtype]
    args.kv_dtype = _kv_dtype_code(k.dtype, q.dtype)

    args.q = q.data_ptr()
    args.q_stride_token, args.q_stride_head = q.stride(0), q.stride(1)
    if paged:
        args.num_pages = k.shape[0]
        args.max_pages_per_request = page_table.shape[1]
        args.k_stride_page, args.k_stride_head, args.k_stride_token = k.stride()[:3]
        args.v_stride_page, args.v_stride_head, args.v_stride_token = v.stride()[:3]
        args.page_table = page_table.data_ptr()
        args.page_table_stride_batch, args.page_table_stride_page = page_table.stride()
        args.seqused_k = seqused_k.data_ptr()
    else:
        args.total_k = k.shape[0]
        args.k_stride_token, args.k_stride_head = k.stride()[:2]
        args.v_stride_token, args.v_stride_head = v.stride()[:2]
        args.cu_seqlens_k = cu_seqlens_k.data_ptr()
    args.k = k.data_ptr()
    args.v = v.data_ptr()
    if k.dtype == torch.float8_e4m3fn:
        # Per-token scales; the slot counts tell the library how far each row reaches.
        if k_scale is not None:
            args.k_token_scale = k_scale.data_ptr()
            args.k_token_scale_stride_head = k_scale.stride(0)
            args.k_token_scale_slots = k_scale.shape[1]
        if v_scale is not None:
            args.v_token_scale = v_scale.data_ptr()
            args.v_token_scale_stride_head = v_scale.stride(0)
            args.v_token_scale_slots = v_scale.shape[1]
    elif k_scale is not None:
        args.k_scale, args.v_scale = k_scale.data_ptr(), v_scale.data_ptr()
        if k_scale.dim() == 4:  # page-local planes: their strides, not a table size
            args.nvfp4_scale_layout = _lib.NVFP4_SCALES_PAGE_LOCAL
            args.k_scale_stride_page, args.k_scale_stride_head = k_scale.stride()[:2]
            args.v_scale_stride_page, args.v_scale_stride_head = v_scale.stride()[:2]
        else:
            args.nvfp4_scale_layout = _lib.NVFP4_SCALES_SWIZZLED
            args.k_scale_bytes, args.v_scale_bytes = k_scale.numel(), v_scale.numel()

    args.q2k_indices = q2k_indices.data_ptr()
    args.idx_stride_head, args.idx_stride_token, args.idx_stride_topk = q2k_indices.stride()
    args.cu_seqlens_q = cu_seqlens_q.data_ptr()

    args.causal = int(causal)
    args.causal_entry_limit = int(causal_entry_limit)
    if q_offset_tensor is not None:
        args.q_offset_mode = _lib.Q_OFFSET_PER_REQUEST
        args.q_offset_per_request = q_offset_tensor.data_ptr()
    elif q_offset_value is not None:
        args.q_offset_mode = _lib.Q_OFFSET_SCALAR
        args.q_offset_value = q_offset_value
    else:
        args.q_offset_mode = _lib.Q_OFFSET_END_ALIGNED

    args.softmax_scale = softmax_scale
    args.k_global_scale = k_global_scale
    args.v_global_scale = v_global_scale
    args.k_global_scale_device = _pointer(k_global_scale_tensor)
    args.v_global_scale_device = _pointer(v_global_scale_tensor)
    args.lse_temperature_scale = lse_temperature_scale

    args.out = out.data_ptr()
    args.out_stride_token, args.out_stride_head = out.stride(0), out.stride(1)
    if lse is not None:
        args.lse = lse.data_ptr()
        args.lse_stride_token, args.lse_stride_head = lse.stride()
    if lse_t is not None:
        args.lse_t = lse_t.data_ptr()
        args.lse_t_stride_token, args.lse_t_stride_head = lse_t.stride()
    return args


@torch.library.custom_op("flashmsa::msa_sparse_attention", mutates_args=("out", "lse", "lse_t"))
def _msa_sparse_attention_op(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q2k_indices: torch.Tensor,
        cu_seqlens_q: torch.Tensor, cu_seqlens_k: Optional[torch.Tensor],
        page_table: Optional[torch.Tensor], seqused_k: Optional[torch.Tensor],
        k_scale: Optional[torch.Tensor], v_scale: Optional[torch.Tensor],
        q_offset_tensor: Optional[torch.Tensor], q_offset_value: Optional[int], causal: bool,
        softmax_scale: float, k_global_scale: float, v_global_scale: float,
        lse_temperature_scale: float, workspace_id: int, out: torch.Tensor,
        lse: Optional[torch.Tensor], lse_t: Optional[torch.Tensor],
        k_global_scale_tensor: Optional[torch.Tensor] = None,
        v_global_scale_tensor: Optional[torch.Tensor] = None,
        causal_entry_limit: bool = False) -> None:
    """Writes out (and lse, lse_t when given). workspace_id 0 = no workspace. A global-scale
    tensor, when given, replaces its float (then 1) and is read by the backend in place.
    Arguments were validated by msa_sparse_attention; the library validates them again before
    any work."""
    _check_supported(q)
    if k.dtype == torch.uint8:  # NVFP4 block scales may come as float8_e4m3fn: read the bytes
        k_scale, v_scale = k_scale.view(torch.uint8), v_scale.view(torch.uint8)
    args = _fill_args(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k, page_table, seqused_k,
                      k_scale, v_scale, q_offset_tensor, q_offset_value, causal, softmax_scale,
                      k_global_scale, v_global_scale, lse_temperature_scale, out, lse, lse_t,
                      k_global_scale_tensor, v_global_scale_tensor, causal_entry_limit)
    workspace = find_workspace(workspace_id)
    if workspace is not None:
        # The buffer it holds already; it grows (never during capture) if the call needs more.
        args.workspace = workspace.buffer.data_ptr() if workspace.nbytes else None
        args.workspace_bytes = workspace.nbytes
        allocate = workspace.reserve
    else:
        # PyTorch's caching allocator, on the current stream: no synchronisation.
        def allocate(nbytes):
            return torch.empty(nbytes, dtype=torch.uint8, device=q.device)
    _lib.sparse_attention_allocating(args, allocate, launch_overrides_in_effect())


@_msa_sparse_attention_op.register_fake
def _msa_sparse_attention_fake(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k, page_table,
                               seqused_k, k_scale, v_scale, q_offset_tensor, q_offset_value,
                               causal, softmax_scale, k_global_scale, v_global_scale,
                               lse_temperature_scale, workspace_id, out, lse, lse_t,
                               k_global_scale_tensor=None, v_global_scale_tensor=None,
                               causal_entry_limit=False):
    # The op only writes its output arguments; there is nothing to allocate.
    return None
