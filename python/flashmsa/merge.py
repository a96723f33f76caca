"""flashmsa.merge_attention_states: the attention state over a union of disjoint key sets from
the states over each set.

Context-parallel serving splits a request's keys over devices; each attends to its share with
return_softmax_lse=True and the partial (out, lse) pairs are merged here into exactly what one
call over all the keys gives, up to fp32 accumulation:

    m = max_i lse_i;  w_i = exp(lse_i - m);  lse = m + log(sum_i w_i);
    out = sum_i (w_i / sum_i w_i) * out_i   (fp32, rounded once to out's dtype)

per (row, head). lse is the natural log-sum-exp of the contract (section 6). A (row, head)
whose every lse_i is -inf read no key in any partial: out = 0 exactly and lse = -inf. A partial
of weight 0 contributes nothing, whatever its out holds. CPU tensors are merged by the library
(flashmsa_merge_attention_states); CUDA tensors by torch operations on the current stream,
with no host synchronisation, so the merge can be captured in a CUDA graph.
"""
import collections.abc
import ctypes
import math

import torch

from . import _lib

_DTYPES = {torch.bfloat16: _lib.MERGE_DTYPE_BF16, torch.float16: _lib.MERGE_DTYPE_FP16,
           torch.float32: _lib.MERGE_DTYPE_FP32}


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _states(name, value):
    """A sequence of tensors, or one tensor stacking them along dim 0 -> a list."""
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            raise ValueError(f"{name} must be a sequence of tensors or one tensor stacking them "
                             "along dim 0, got a 0-D tensor")
        return list(value.unbind(0))
    if isinstance(value, (str, bytes)) or not isinstance(value, collections.abc.Sequence):
        raise TypeError(f"{name} must be a sequence of tensors, got {type(value).__name__}")
    states = list(value)
    for i, state in enumerate(states):
        if not isinstance(state, torch.Tensor):
            raise TypeError(f"{name}[{i}] must be a torch.Tensor, got {type(state).__name__}")
    return states


def _check_last_dim_contiguous(name, tensor):
    if tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous last dim (stride 1), "
                         f"got strides {tuple(tensor.stride())}")


def _check_like(name, tensor, device, dtype, shape, meaning):
    if tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device}, expected outs[0]'s device {device}")
    if tensor.dtype != dtype:
        raise ValueError(f"{name} must have dtype {_dtype_name(dtype)}, "
                         f"got {_dtype_name(tensor.dtype)}")
    if tuple(tensor.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {meaning} = {tuple(shape)}, "
                         f"got {tuple(tensor.shape)}")


def _validate(outs, lses, out, lse_out):
    """Checks on metadata only (no tensor data is read). Returns the two lists of states."""
    outs = _states("outs", outs)
    lses = _states("lses", lses)
    if not outs:
        raise ValueError("outs must hold at least one partial output, got none")
    if len(lses) != len(outs):
        raise ValueError(f"lses must hold one lse per partial output ({len(outs)}), "
                         f"got {len(lses)}")
    for name, value in (("out", out), ("lse_out", lse_out)):
        if value is not None and not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")

    first = outs[0]
    device, dtype = first.device, first.dtype
    if device.type not in ("cpu", "cuda"):
        raise NotImplementedError(f"flashmsa merges CPU and CUDA tensors, outs[0] is on {device}")
    if dtype not in _DTYPES:
        raise ValueError(f"outs[0] must have dtype {' or '.join(map(_dtype_name, _DTYPES))}, "
                         f"got {_dtype_name(dtype)}")
    if first.dim() != 3:
        raise ValueError("outs[0] must be 3-D (total_q, num_heads, head_dim), "
                         f"got shape {tuple(first.shape)}")
    total_q, num_heads, _ = first.shape
    out_meaning = "outs[0]'s (total_q, num_heads, head_dim)"
    lse_meaning = "(total_q, num_heads) of outs[0]"
    for i, partial in enumerate(outs):
        _check_like(f"outs[{i}]", partial, device, dtype, first.shape, out_meaning)
        _check_last_dim_contiguous(f"outs[{i}]", partial)
    for i, lse in enumerate(lses):
        _check_like(f"lses[{i}]", lse, device, torch.float32, (total_q, num_heads), lse_meaning)
    if out is not None:
        _check_like("out", out, device, dtype, first.shape, out_meaning)
        _check_last_dim_contiguous("out", out)
    if lse_out is not None:
        _check_like("lse_out", lse_out, device, torch.float32, (total_q, num_heads), lse_meaning)
    return outs, lses


def merge_attention_states(outs, lses, *, out=None, lse_out=None):
    """Merge partial attention states over disjoint key sets into the state over their union.

    outs: N >= 1 partial outputs (total_q, num_heads, head_dim) of one dtype (bfloat16, float16
    or float32), last dim contiguous; lses: their N float32 (total_q, num_heads) log-sum-exps
    (natural log, -inf where a partial read nothing), e.g. what msa_sparse_attention returns
    with return_softmax_lse=True over each share of the keys. Either may also be one tensor
    stacking the states along dim 0. All on one device.

    Returns (out, lse): out in the partials' dtype, lse float32. out= and lse_out= are written
    in place and returned; either may be one of the partials itself. Exact up to fp32
    accumulation; no NaN for finite outs and lses that are finite or -inf (+inf or NaN lse is
    not a valid input). Forward only: no autograd.
    """
    outs, lses = _validate(outs, lses, out, lse_out)
    first = outs[0]
    if lse_out is None:
        lse_out = torch.empty(first.shape[:2], dtype=torch.float32, device=first.device)
    if first.device.type == "cpu":
        if out is None:
            out = torch.empty(first.shape, dtype=first.dtype, device=first.device)
        _merge_cpu(outs, lses, out, lse_out)
        return out, lse_out
    with torch.no_grad():
        return _merge_torch(outs, lses, out, lse_out)


def _merge_cpu(outs, lses, out, lse_out):
    """The library's merge (flashmsa_merge_attention_states) on host memory."""
    count = len(outs)
    args = _lib.new_merge_args()
    args.device = _lib.DEVICE_CPU
    args.num_states = count
    args.total_q, args.num_heads, args.head_dim = out.shape
    args.dtype = _DTYPES[out.dtype]

    def pointers(tensors):
        return (ctypes.c_void_p * count)(*[tensor.data_ptr() for tensor in tensors])

    def strides(tensors, dim):
        return (ctypes.c_int64 * count)(*[tensor.stride(dim) for tensor in tensors])

    # Kept in locals until the call returns: the struct only points at them.
    out_pointers, lse_pointers = pointers(outs), pointers(lses)
    out_token, out_head = strides(outs, 0), strides(outs, 1)
    lse_token, lse_head = strides(lses, 0), strides(lses, 1)
    args.partial_outs = ctypes.cast(out_pointers, ctypes.POINTER(ctypes.c_void_p))
    args.partial_lses = ctypes.cast(lse_pointers, ctypes.POINTER(ctypes.c_void_p))
    args.partial_out_stride_token, args.partial_out_stride_head = out_token, out_head
    args.partial_lse_stride_token, args.partial_lse_stride_head = lse_token, lse_head
    args.out = out.data_ptr()
    args.out_stride_token, args.out_stride_head = out.stride(0), out.stride(1)
    args.lse = lse_out.data_ptr()
    args.lse_stride_token, args.lse_stride_head = lse_out.stride()
    _lib.merge_attention_states(args)


def _merge_torch(outs, lses, out, lse_out):
    """The same arithmetic as the library's, in torch operations on the tensors' device: no
    host synchronisation, so it can run inside CUDA-graph capture."""
    lse = torch.stack(lses)  # (N, total_q, num_heads); a copy, so lse_out may alias lses[i]
    m = lse.amax(dim=0)
    read_nothing = torch.isneginf(m)
    # With m = 0 where every state is -inf, exp(-inf - 0) = 0 below instead of NaN.
    m = torch.where(read_nothing, 0.0, m)
    weights = torch.exp(lse - m)  # 0 for a state that read nothing
    total = weights.sum(dim=0)  # >= 1 (the largest weight is 1) unless every state is -inf
    merged_lse = torch.where(read_nothing, -math.inf, m + torch.log(total))
    scales = weights / torch.where(read_nothing, 1.0, total)
    accumulator = torch.zeros(outs[0].shape, dtype=torch.float32, device=outs[0].device)
    for i, partial in enumerate(outs):
        # Masked rather than multiplied by 0, so that what a weightless state's out holds
        # cannot turn into NaN here.
        contributes = (weights[i] > 0).unsqueeze(-1)
        accumulator.addcmul_(scales[i].unsqueeze(-1), torch.where(contributes, partial, 0))
    # Everything is read into the accumulator before out is written: out may alias outs[i].
    if out is None:
        out = accumulator if outs[0].dtype == torch.float32 else accumulator.to(outs[0].dtype)
    else:
        out.copy_(accumulator)
    lse_out.copy_(merged_lse)
    return out, lse_out
