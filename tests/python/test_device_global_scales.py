"""Device-resident global scales (contract section 6): k_global_scale / v_global_scale given as
one-element float32 tensors on q's device, read by the backend in place. On the CPU backend the
"device" is the host: the tensors here are CPU tensors, and everything the contract promises of
them is checked: bitwise the float form's result for powers of two, the section 7 bounds for
other values, the value read when the call runs (not when it was traced), and a ValueError
naming the argument for any tensor that is not a one-element float32 tensor on q's device."""
import math

import pytest
import torch

import flashmsa
from msa_inputs import FP8_K_GLOBAL_SCALE, FP8_V_GLOBAL_SCALE, build_case, reference_kwargs
from torch_reference import check_close, reference_msa

TEMPERATURE = 0.7
POWERS_OF_TWO = (0.5, 2.0, 4.0)
OTHER_VALUES = (0.37, 1.9)
SHAPES = {"shape ()": (), "shape (1,)": (1,)}


def make_case(q_dtype, kv_dtype, layout="flat"):
    """A small causal GQA case. fp8 K/V come with their own descales (msa_inputs), so the values
    under test multiply those: the scores stay those of randn / 3 data."""
    kv_name = "fp8" if kv_dtype == "fp8" else None
    return build_case([40, 25], [700, 300], 8, 2, 8, True, q_dtype=q_dtype, kv_dtype=kv_name,
                      layout=layout, seed=41)


def natural_scales(kv_dtype):
    if kv_dtype == "fp8":
        return FP8_K_GLOBAL_SCALE, FP8_V_GLOBAL_SCALE
    return 1.0, 1.0


def scale_tensor(value, shape):
    return torch.full(shape, value, dtype=torch.float32)


def run(kwargs, **changes):
    return flashmsa.msa_sparse_attention(**dict(kwargs, **changes), return_temperature_lse=True,
                                         lse_temperature_scale=TEMPERATURE)


def assert_bitwise_equal(got, want, case):
    for name, a, b in zip(("out", "lse", "lse_t"), got, want):
        assert torch.equal(a, b), f"[{case}] {name} differs bitwise from the float form's"


Q_DTYPES = [torch.bfloat16, torch.float16]
KV_DTYPES = ["fp8", "q"]  # fp8 E4M3, or q's dtype


@pytest.mark.parametrize("shape_name", list(SHAPES))
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("q_dtype", Q_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_power_of_two_tensor_scales_are_bitwise_the_float_form(q_dtype, kv_dtype, shape_name):
    kwargs = make_case(q_dtype, kv_dtype)
    k_natural, v_natural = natural_scales(kv_dtype)
    for value in POWERS_OF_TWO:
        k_value, v_value = value * k_natural, v_natural / value
        case = f"q {q_dtype}, K/V {kv_dtype}, {shape_name}, k x{value}, v x{1 / value}"
        from_floats = run(kwargs, k_global_scale=k_value, v_global_scale=v_value)
        shape = SHAPES[shape_name]
        both = run(kwargs, k_global_scale=scale_tensor(k_value, shape),
                   v_global_scale=scale_tensor(v_value, shape))
        assert_bitwise_equal(both, from_floats, case + ", both tensors")
        # Either one alone, the other a float.
        k_only = run(kwargs, k_global_scale=scale_tensor(k_value, shape), v_global_scale=v_value)
        assert_bitwise_equal(k_only, from_floats, case + ", k tensor, v float")
        v_only = run(kwargs, k_global_scale=k_value, v_global_scale=scale_tensor(v_value, shape))
        assert_bitwise_equal(v_only, from_floats, case + ", k float, v tensor")


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("q_dtype", Q_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_other_tensor_scales_are_within_the_accuracy_bounds(q_dtype, kv_dtype):
    kwargs = make_case(q_dtype, kv_dtype)
    k_natural, v_natural = natural_scales(kv_dtype)
    for shape_name, shape in SHAPES.items():
        for value in OTHER_VALUES:
            case = f"q {q_dtype}, K/V {kv_dtype}, {shape_name}, scales x{value}"
            k_value, v_value = value * k_natural, value * v_natural
            out, lse, lse_t = run(kwargs, k_global_scale=scale_tensor(k_value, shape),
                                  v_global_scale=scale_tensor(v_value, shape))
            reference = dict(reference_kwargs(kwargs), k_global_scale=k_value,
                             v_global_scale=v_value)
            ref_out, ref_lse, ref_lse_t = reference_msa(**reference,
                                                        lse_temperature_scale=TEMPERATURE)
            check_close(out, ref_out, q_dtype, lse=lse, ref_lse=ref_lse, lse_t=lse_t,
                        ref_lse_t=ref_lse_t, case=case)


def test_paged_call_with_tensor_scales_is_bitwise_the_flat_call():
    flat, paged = (make_case(torch.bfloat16, "fp8", layout) for layout in ("flat", "paged"))
    scales = dict(k_global_scale=scale_tensor(FP8_K_GLOBAL_SCALE * 0.37, (1,)),
                  v_global_scale=scale_tensor(FP8_V_GLOBAL_SCALE * 1.9, ()))
    assert_bitwise_equal(run(paged, **scales), run(flat, **scales), "paged vs flat, tensor scales")


def test_the_value_is_read_when_the_call_runs():
    """What a CUDA-graph replay relies on: a call reads the tensor's value at that call, so an
    in-place update between calls takes effect; nothing was copied when the scale was given."""
    kwargs = make_case(torch.bfloat16, "q")
    k_scale, v_scale = scale_tensor(0.5, ()), scale_tensor(2.0, (1,))
    first = run(kwargs, k_global_scale=k_scale, v_global_scale=v_scale)
    assert_bitwise_equal(first, run(kwargs, k_global_scale=0.5, v_global_scale=2.0),
                         "first values 0.5 / 2.0")
    k_scale.fill_(4.0)
    v_scale.fill_(0.5)
    second = run(kwargs, k_global_scale=k_scale, v_global_scale=v_scale)
    assert_bitwise_equal(second, run(kwargs, k_global_scale=4.0, v_global_scale=0.5),
                         "values updated in place to 4.0 / 0.5")


def test_torch_compile_reads_the_tensors_at_each_call():
    kwargs = make_case(torch.bfloat16, "q")
    arguments = [kwargs[name] for name in ("q", "k", "v", "q2k_indices", "cu_seqlens_q",
                                           "cu_seqlens_k")]

    def attention(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k, k_scale, v_scale):
        return flashmsa.msa_sparse_attention(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k,
                                             causal=True, k_global_scale=k_scale,
                                             v_global_scale=v_scale)

    torch._dynamo.reset()
    compiled = torch.compile(attention, fullgraph=True)
    k_scale, v_scale = scale_tensor(2.0, ()), scale_tensor(0.5, (1,))
    for k_value, v_value in ((2.0, 0.5), (0.5, 4.0)):
        k_scale.fill_(k_value)
        v_scale.fill_(v_value)
        got = compiled(*arguments, k_scale, v_scale)
        want = attention(*arguments, k_value, v_value)
        assert torch.equal(got, want), f"compiled call, scales {k_value} / {v_value}"


def test_custom_op_with_tensor_scales_passes_opcheck():
    # bf16 K/V: opcheck's own checks do arithmetic on every tensor argument, which fp8 lacks.
    kwargs = make_case(torch.bfloat16, "q")
    q = kwargs["q"]
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:2], dtype=torch.float32)
    arguments = (q, kwargs["k"], kwargs["v"], kwargs["q2k_indices"], kwargs["cu_seqlens_q"],
                 kwargs["cu_seqlens_k"], None, None, None, None, None, None, True,
                 q.shape[-1] ** -0.5, 1.0, 1.0, 1.0, 0, out, lse, None,
                 scale_tensor(0.5, ()), scale_tensor(2.0, (1,)))
    torch.library.opcheck(torch.ops.flashmsa.msa_sparse_attention.default, arguments)


# --- ValueError: a tensor that is not a one-element float32 tensor on q's device ---------------

def bad_tensors():
    cases = {
        "float64": torch.tensor(0.5, dtype=torch.float64),
        "float16": torch.tensor([0.5], dtype=torch.float16),
        "int32": torch.tensor(1, dtype=torch.int32),
        "2 elements": torch.tensor([0.5, 0.5]),
        "0 elements": torch.empty(0),
        "2-D (1, 1)": torch.full((1, 1), 0.5),
        "meta device": torch.tensor(0.5, device="meta"),
    }
    if torch.cuda.is_available():
        cases["cuda device"] = torch.tensor(0.5, device="cuda")
    return cases


@pytest.mark.parametrize("bad", list(bad_tensors()))
@pytest.mark.parametrize("name", ["k_global_scale", "v_global_scale"])
def test_bad_scale_tensor_is_a_value_error_naming_it(name, bad):
    kwargs = make_case(torch.bfloat16, "q")
    out = torch.full(kwargs["q"].shape, math.nan, dtype=torch.bfloat16)
    with pytest.raises(ValueError) as caught:
        flashmsa.msa_sparse_attention(**kwargs, out=out, **{name: bad_tensors()[bad]})
    message = str(caught.value)
    assert name in message, f"[{name}: {bad}] message {message!r} does not name {name}"
    assert "float32" in message, f"[{name}: {bad}] message {message!r} does not say float32"
    assert bool(torch.isnan(out).all()), f"[{name}: {bad}] out was written before the error"


def test_cuda_q_with_a_cpu_scale_tensor_is_a_value_error():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the meta device stands in for another device above")
    kwargs = {name: value.cuda() if isinstance(value, torch.Tensor) else value
              for name, value in make_case(torch.bfloat16, "q").items()}
    with pytest.raises(ValueError, match="k_global_scale"):
        flashmsa.msa_sparse_attention(**kwargs, k_global_scale=torch.tensor(0.5))
