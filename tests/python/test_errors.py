"""One test per error of contract section 8: the exception type, and a message that names the
argument. Every call here would otherwise run, so each also proves that the check comes before
any work (out=, poisoned with NaN, must come back untouched)."""
import math
import types

import pytest
import torch

import flashmsa
from flashmsa import _lib, api
from msa_inputs import HEAD_DIM, build_case


@pytest.fixture(scope="module")
def flat():
    return build_case([30, 20], [600, 400], 4, 2, 8, True, seed=1)


@pytest.fixture(scope="module")
def paged():
    return build_case([30, 20], [600, 400], 4, 2, 8, True, layout="paged", seed=2)


@pytest.fixture(scope="module")
def nvfp4():
    return build_case([30, 20], [600, 400], 4, 2, 8, True, kv_dtype="nvfp4", seed=3)


def expect(error, names, kwargs, **changes):
    """Call with `changes` applied; assert `error` whose message names every one of `names`,
    and that out= was not written."""
    call = dict(kwargs, **changes)
    q = call["q"]
    poisoned = None
    if isinstance(q, torch.Tensor) and q.dim() == 3 and "out" not in changes:
        poisoned = torch.full(q.shape, math.nan, dtype=q.dtype if q.dtype in (
            torch.bfloat16, torch.float16) else torch.bfloat16)
        call["out"] = poisoned
    with pytest.raises(error) as caught:
        flashmsa.msa_sparse_attention(**call)
    message = str(caught.value)
    for name in ([names] if isinstance(names, str) else names):
        assert name in message, f"{error.__name__} message {message!r} does not name {name!r}"
    if poisoned is not None:
        assert bool(torch.isnan(poisoned).all()), "out was written before the error"
    return message


def without(kwargs, *names):
    return {key: value for key, value in kwargs.items() if key not in names}


# --- TypeError: a non-tensor where a tensor is due, a workspace of another type -------------

@pytest.mark.parametrize("name", ["q", "k", "v", "q2k_indices", "cu_seqlens_q", "cu_seqlens_k"])
def test_non_tensor_argument(flat, name):
    expect(TypeError, name, flat, **{name: flat[name].tolist()})


def test_non_tensor_paged_arguments(paged):
    expect(TypeError, "page_table", paged, page_table=paged["page_table"].tolist())
    expect(TypeError, "seqused_k", paged, seqused_k=[600, 400])


def test_non_tensor_nvfp4_scales(nvfp4):
    expect(TypeError, "k_scale", nvfp4, k_scale=nvfp4["k_scale"].tolist())


def test_non_tensor_out(flat):
    expect(TypeError, "out", flat, out=[[0.0]])


def test_workspace_of_another_type(flat):
    expect(TypeError, "workspace", flat, workspace=torch.empty(100, dtype=torch.uint8))


@pytest.mark.parametrize("q_offset", [1.5, "3", True])
def test_q_offset_of_another_type(flat, q_offset):
    expect(TypeError, "q_offset", flat, q_offset=q_offset)


@pytest.mark.parametrize("name", ["softmax_scale", "k_global_scale", "v_global_scale",
                                  "lse_temperature_scale"])
def test_scale_of_another_type(flat, name):
    expect(TypeError, name, flat, **{name: "0.5"})


# --- ValueError: dtype ------------------------------------------------------------------------

def test_q_dtype(flat):
    expect(ValueError, ["q", "bfloat16"], flat, q=flat["q"].float())


def test_kv_dtype(flat):
    expect(ValueError, ["k", "float32"], flat, k=flat["k"].float(), v=flat["v"].float())


def test_kv_of_the_other_half_precision(flat):
    expect(ValueError, "k", flat, k=flat["k"].half(), v=flat["v"].half())


def test_v_dtype_differs_from_k(flat):
    expect(ValueError, ["v", "dtype"], flat, v=flat["v"].to(torch.float8_e4m3fn))


def test_q2k_dtype(flat):
    expect(ValueError, ["q2k_indices", "int32"], flat, q2k_indices=flat["q2k_indices"].long())


@pytest.mark.parametrize("name", ["cu_seqlens_q", "cu_seqlens_k"])
def test_cu_seqlens_dtype(flat, name):
    expect(ValueError, [name, "int32"], flat, **{name: flat[name].long()})


def test_paged_metadata_dtype(paged):
    expect(ValueError, ["page_table", "int32"], paged, page_table=paged["page_table"].long())
    expect(ValueError, ["seqused_k", "int32"], paged, seqused_k=paged["seqused_k"].long())


def test_q_offset_tensor_dtype(flat):
    expect(ValueError, ["q_offset", "int32"], flat, q_offset=torch.tensor([1, 2]))


def test_scale_dtype(nvfp4):
    expect(ValueError, ["k_scale", "uint8"], nvfp4, k_scale=nvfp4["k_scale"].float())


def test_out_dtype(flat):
    out = torch.empty(flat["q"].shape, dtype=torch.float16)
    expect(ValueError, ["out", "bfloat16"], flat, out=out)


# --- ValueError: rank and shape ---------------------------------------------------------------

def test_q_rank(flat):
    expect(ValueError, ["q", "3-D"], flat, q=flat["q"].flatten(1))


def test_kv_rank(flat):
    expect(ValueError, ["k", "3-D"], flat, k=flat["k"][None], v=flat["v"][None])


def test_paged_kv_rank(paged):
    expect(ValueError, ["k", "4-D"], paged, k=paged["k"][0], v=paged["v"][0])


def test_v_shape_differs_from_k(flat):
    expect(ValueError, ["v", "shape"], flat, v=flat["v"][:-1])


def test_kv_head_dim_differs_from_q(flat):
    expect(ValueError, ["k", "head_dim"], flat, k=flat["k"][..., :64], v=flat["v"][..., :64])


def test_nvfp4_last_dim(nvfp4):
    expect(ValueError, ["k", "NVFP4"], nvfp4,
           k=torch.zeros(1000, 2, HEAD_DIM, dtype=torch.uint8),
           v=torch.zeros(1000, 2, HEAD_DIM, dtype=torch.uint8))


def test_page_size(paged):
    expect(ValueError, ["k", "128"], paged, k=paged["k"][:, :, :64], v=paged["v"][:, :, :64])


def test_heads_not_a_multiple(flat):
    q = torch.zeros(flat["q"].shape[0], 3, HEAD_DIM, dtype=torch.bfloat16)
    expect(ValueError, ["num_qo_heads", "num_kv_heads"], flat, q=q)


def test_q2k_rank(flat):
    expect(ValueError, ["q2k_indices", "3-D"], flat, q2k_indices=flat["q2k_indices"][0])


def test_q2k_heads(flat):
    expect(ValueError, ["q2k_indices", "num_kv_heads"], flat,
           q2k_indices=flat["q2k_indices"][:1])


def test_q2k_rows(flat):
    expect(ValueError, ["q2k_indices", "total_q"], flat,
           q2k_indices=flat["q2k_indices"][:, :-1])


@pytest.mark.parametrize("topk", [0, 65])
def test_topk_out_of_range(flat, topk):
    q2k = torch.zeros(2, flat["q"].shape[0], topk, dtype=torch.int32)
    expect(ValueError, ["q2k_indices", "topk", "64"], flat, q2k_indices=q2k)


def test_cu_seqlens_q_too_short(flat):
    expect(ValueError, "cu_seqlens_q", flat, cu_seqlens_q=torch.zeros(1, dtype=torch.int32))


def test_cu_seqlens_q_rank(flat):
    expect(ValueError, ["cu_seqlens_q", "1-D"], flat,
           cu_seqlens_q=flat["cu_seqlens_q"].view(1, -1))


def test_cu_seqlens_k_length(flat):
    expect(ValueError, ["cu_seqlens_k", "batch_size + 1"], flat,
           cu_seqlens_k=flat["cu_seqlens_k"][:-1])


def test_seqused_k_length(paged):
    expect(ValueError, ["seqused_k", "batch_size"], paged, seqused_k=paged["seqused_k"][:1])


def test_page_table_rows(paged):
    expect(ValueError, ["page_table", "batch_size"], paged, page_table=paged["page_table"][:1])


def test_page_table_rank(paged):
    expect(ValueError, ["page_table", "2-D"], paged, page_table=paged["page_table"].flatten())


def test_q_offset_length(flat):
    expect(ValueError, ["q_offset", "batch_size"], flat,
           q_offset=torch.zeros(3, dtype=torch.int32))


def test_out_shape(flat):
    out = torch.empty(flat["q"].shape[0] + 1, 4, HEAD_DIM, dtype=torch.bfloat16)
    expect(ValueError, ["out", "shape"], flat, out=out)


# --- ValueError: device -----------------------------------------------------------------------
# This machine has no GPU; the meta device stands in for "another device".

@pytest.mark.parametrize("name", ["k", "q2k_indices", "cu_seqlens_q", "cu_seqlens_k"])
def test_tensor_on_another_device(flat, name):
    changes = {name: flat[name].to("meta")}
    if name == "k":
        changes["v"] = flat["v"].to("meta")
    expect(ValueError, [name, "device"], flat, **changes)


def test_paged_tensor_on_another_device(paged):
    expect(ValueError, ["page_table", "device"], paged, page_table=paged["page_table"].to("meta"))


def test_out_on_another_device(flat):
    expect(ValueError, ["out", "device"], flat, out=torch.empty(flat["q"].shape, device="meta",
                                                               dtype=torch.bfloat16))


def test_workspace_on_another_device(flat):
    workspace = flashmsa.MSASparseAttentionWorkspace("meta")
    expect(ValueError, ["workspace", "device"], flat, workspace=workspace)


def test_global_scale_tensor_on_another_device(flat):
    # A tensor scale is read in place by the backend, so it must be on q's device.
    expect(ValueError, ["k_global_scale", "device"], flat,
           k_global_scale=torch.tensor(0.5, device="meta"))


# --- ValueError: strides ----------------------------------------------------------------------

def test_q_last_dim_not_contiguous(flat):
    q = flat["q"].transpose(1, 2).contiguous().transpose(1, 2)
    expect(ValueError, ["q", "contiguous last dim"], flat, q=q)


def test_kv_last_dim_not_contiguous(flat):
    k = torch.empty(*flat["k"].shape, 2, dtype=flat["k"].dtype)[..., 0]
    expect(ValueError, ["k", "contiguous last dim"], flat, k=k, v=k)


def test_out_last_dim_not_contiguous(flat):
    out = torch.empty(*flat["q"].shape, 2, dtype=torch.bfloat16)[..., 0]
    expect(ValueError, ["out", "contiguous last dim"], flat, out=out)


def test_cu_seqlens_not_contiguous(flat):
    strided = torch.zeros(6, dtype=torch.int32)[::2]
    strided.copy_(flat["cu_seqlens_q"])
    expect(ValueError, ["cu_seqlens_q", "contiguous"], flat, cu_seqlens_q=strided)


# --- ValueError: contradicting arguments ------------------------------------------------------

def test_paged_without_seqused_k(paged):
    expect(ValueError, ["seqused_k", "page_table"], without(paged, "seqused_k"))


def test_paged_with_cu_seqlens_k(paged, flat):
    expect(ValueError, ["cu_seqlens_k", "page_table"], paged, cu_seqlens_k=flat["cu_seqlens_k"])


def test_flat_without_cu_seqlens_k(flat):
    expect(ValueError, "cu_seqlens_k", without(flat, "cu_seqlens_k"))


def test_flat_with_seqused_k(flat, paged):
    expect(ValueError, ["seqused_k", "page_table"], flat, seqused_k=paged["seqused_k"])


@pytest.mark.parametrize("missing", ["k_scale", "v_scale"])
def test_nvfp4_without_scales(nvfp4, missing):
    expect(ValueError, [missing, "NVFP4"], without(nvfp4, missing))


def test_nvfp4_with_short_scales(nvfp4):
    expect(ValueError, ["v_scale", "bytes"], nvfp4, v_scale=nvfp4["v_scale"][:-1])


def test_scales_on_a_non_nvfp4_call(flat, nvfp4):
    expect(ValueError, ["k_scale", "NVFP4"], flat, k_scale=nvfp4["k_scale"],
           v_scale=nvfp4["v_scale"])


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("name", ["softmax_scale", "k_global_scale", "v_global_scale"])
def test_non_finite_scale(flat, name, value):
    expect(ValueError, [name, "finite"], flat, **{name: value})


@pytest.mark.parametrize("temperature", [0.0, -1.0, math.inf, math.nan])
def test_temperature_not_positive_and_finite(flat, temperature):
    expect(ValueError, "lse_temperature_scale", flat, lse_temperature_scale=temperature)


# --- NotImplementedError: valid but not supported here ----------------------------------------

def test_head_dim_other_than_128(flat):
    def narrow(x):
        return x[..., :64].contiguous()
    message = expect(NotImplementedError, "head_dim", flat, q=narrow(flat["q"]),
                     k=narrow(flat["k"]), v=narrow(flat["v"]))
    assert "128" in message


def test_device_other_than_cpu_and_cuda(flat):
    meta = {name: flat[name].to("meta") for name in ("q", "k", "v", "q2k_indices",
                                                     "cu_seqlens_q", "cu_seqlens_k")}
    expect(NotImplementedError, ["CPU", "CUDA"], flat, **meta, out=None)


def _cuda_query(dtype=torch.bfloat16):
    """Stands in for a CUDA q on this GPU-less machine: _check_supported reads only these."""
    return types.SimpleNamespace(device=torch.device("cuda", 0), dtype=dtype)


def test_gpu_other_than_compute_capability_9_0(monkeypatch):
    monkeypatch.setattr(_lib, "has_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    with pytest.raises(NotImplementedError) as caught:
        api._check_supported(_cuda_query())
    message = str(caught.value)
    assert "8.0" in message and "9.0" in message and "A100" in message, message


def test_hopper_runs_every_kv_dtype(monkeypatch):
    """On compute capability 9.0 no K/V dtype is refused before the library sees the call
    (NVFP4 runs there too)."""
    monkeypatch.setattr(_lib, "has_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    for q_dtype in (torch.bfloat16, torch.float16):
        assert api._check_supported(_cuda_query(q_dtype)) is None


def test_cuda_tensors_with_a_cpu_only_build(monkeypatch):
    monkeypatch.setattr(_lib, "has_cuda", lambda: False)
    with pytest.raises(NotImplementedError, match="no CUDA kernels"):
        api._check_supported(_cuda_query())


# --- Status codes of the C library -> exceptions ----------------------------------------------

def test_library_status_codes_map_to_the_contracts_exceptions(flat):
    """The library validates again on its own; its statuses surface with its text."""
    args = _lib.new_args()
    args.head_dim = 64
    with pytest.raises((ValueError, NotImplementedError)) as caught:
        _lib.sparse_attention(args)
    assert str(caught.value), "the library's error text is empty"
    for status, error in ((_lib.ERROR_INVALID_ARGUMENT, ValueError),
                          (_lib.ERROR_NOT_SUPPORTED, NotImplementedError),
                          (_lib.ERROR_CUDA, RuntimeError), (_lib.ERROR_INTERNAL, RuntimeError)):
        with pytest.raises(error):
            _lib._raise_for(status)
    with pytest.raises(RuntimeError, match="CUDA"):
        _lib._raise_for(_lib.ERROR_CUDA)
