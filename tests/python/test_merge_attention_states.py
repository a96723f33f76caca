"""flashmsa.merge_attention_states and the C entry flashmsa_merge_attention_states on the CPU.

The main check is the context-parallel one: a case's selected blocks are split into 2-4 disjoint
subsets (each partial call gets a q2k_indices holding only its subset of every row's block ids,
-1 after them), each subset is attended to with return_softmax_lse=True, and the merge of the
partials must be the call over the union: lse within 1e-5 relative where finite, -inf exactly
where the union reads nothing (out exactly 0 there), out within contract section 7 of the fp64
reference (tighter bound included) and of the union call.
"""
import ctypes
import math

import pytest
import torch

import flashmsa
from flashmsa import _lib
from flashmsa.merge import _merge_torch
from msa_inputs import build_case, reference_kwargs
from torch_reference import check_close, reference_msa


DTYPES = (torch.bfloat16, torch.float16)
DTYPE_IDS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
LSE_RTOL = 1e-5  # merged lse against the union call's, relative (absolute below |lse| = 1)

# (seqlens_q, seqlens_k, Hq, Hkv, topk, causal, q_offset): a full case, a causal one whose first
# request's first queries sit at negative positions (the union reads nothing there) and whose
# other requests see 4 and 12-13 blocks, a paged one.
CASES = {
    "full": dict(seqlens_q=[100, 37], seqlens_k=[2048, 700], hq=4, hkv=2, topk=16,
                 causal=False),
    "causal_offset": dict(seqlens_q=[40, 130, 64], seqlens_k=[600, 2048, 512], hq=6, hkv=2,
                          topk=8, causal=True, q_offset=[-20, 1500, 448]),
    "paged": dict(seqlens_q=[50, 80], seqlens_k=[900, 1500], hq=8, hkv=4, topk=12, causal=True,
                  layout="paged"),
}


# ---------------------------------------------------------------------------------------------
# Helpers (the GPU suite imports them)
# ---------------------------------------------------------------------------------------------

def build_split_case(name, dtype, seed=0):
    """build_case for CASES[name], with some (KV head, row) pairs selecting nothing at all."""
    spec = dict(CASES[name])
    kwargs = build_case(spec.pop("seqlens_q"), spec.pop("seqlens_k"), spec.pop("hq"),
                        spec.pop("hkv"), spec.pop("topk"), spec.pop("causal"), q_dtype=dtype,
                        seed=seed, **spec)
    q2k = kwargs["q2k_indices"].clone()
    rows = torch.arange(q2k.shape[1])
    q2k[0, rows % 11 == 3, :] = -1  # KV head 0's group reads nothing on these rows, others do
    kwargs["q2k_indices"] = q2k
    return kwargs


def split_q2k(q2k, parts, seed=0):
    """Split every row's selected set into `parts` disjoint subsets: one q2k_indices per part,
    holding that part's ids first (in their original order) and -1 after them.

    A block id goes to one part whatever its position, so a repeated id cannot land in two.
    Rows r with r % 5 == 1 give all their blocks to part r % parts (the other parts read
    nothing there); elsewhere blocks are spread with a random shift per (head, row), so that
    some parts also end up with nothing visible (causal) or nothing at all.
    """
    heads, rows, _ = q2k.shape
    valid = torch.cumprod((q2k >= 0).to(torch.int32), dim=-1).bool()  # up to the first negative
    generator = torch.Generator().manual_seed(seed)
    shift = torch.randint(0, parts, (heads, rows, 1), generator=generator)
    part = (q2k.to(torch.int64).clamp(min=0) * 7919 + shift) % parts
    whole = torch.arange(rows) % 5 == 1
    part[:, whole, :] = (torch.arange(rows)[whole] % parts).view(1, -1, 1)
    pieces = []
    for p in range(parts):
        keep = valid & (part == p)
        order = torch.argsort((~keep).to(torch.int8), dim=-1, stable=True)
        ids = torch.gather(q2k, -1, order)
        kept = torch.gather(keep, -1, order)
        pieces.append(torch.where(kept, ids, -1).to(torch.int32).contiguous())
    return pieces


def partial_states(kwargs, pieces):
    """(outs, lses) of one call per piece of q2k_indices."""
    outs, lses = [], []
    for piece in pieces:
        out, lse = flashmsa.msa_sparse_attention(**dict(kwargs, q2k_indices=piece),
                                                 return_softmax_lse=True)
        outs.append(out)
        lses.append(lse)
    return outs, lses


def check_lse_matches(name, got, want):
    """-inf exactly where want is -inf; elsewhere within LSE_RTOL (absolute below |lse| = 1)."""
    got, want = got.double().cpu(), want.double().cpu()
    assert got.shape == want.shape, f"[{name}] lse shape {tuple(got.shape)} != {tuple(want.shape)}"
    got_empty, want_empty = torch.isneginf(got), torch.isneginf(want)
    assert torch.equal(got_empty, want_empty), (
        f"[{name}] lse is -inf at {int(got_empty.sum())} entries, the union call's at "
        f"{int(want_empty.sum())}: {int((got_empty != want_empty).sum())} disagree")
    finite = ~want_empty
    assert bool(torch.isfinite(got[finite]).all()), f"[{name}] lse has NaN/inf on finite entries"
    error = ((got - want).abs() / want.abs().clamp(min=1.0))[finite]
    if error.numel():
        assert error.max().item() <= LSE_RTOL, (
            f"[{name}] merged lse differs from the union call's by {error.max().item():.3e} "
            f"relative (> {LSE_RTOL})")


def check_merged(name, kwargs, merged, merged_lse, union_out, union_lse, reference=None):
    """The merge of the partials against the call over the union and the fp64 reference."""
    dtype = kwargs["q"].dtype
    assert merged.dtype == dtype and merged_lse.dtype == torch.float32, f"[{name}] dtypes"
    check_lse_matches(name, merged_lse, union_lse)
    empty = torch.isneginf(union_lse.cpu())
    zeros = merged.cpu()[empty]
    assert bool((zeros == 0).all()), (
        f"[{name}] {int((zeros != 0).sum())} output values of rows that read nothing are not "
        "exactly 0")
    if reference is None:
        reference = reference_kwargs(kwargs)
    ref_out, ref_lse, _ = reference_msa(**reference)
    plain, _, _ = reference_msa(**reference, compute_dtype=dtype)
    check_close(merged, ref_out, dtype, lse=merged_lse, ref_lse=ref_lse, baseline=plain,
                case=f"{name}: merged vs fp64 reference")
    check_close(merged, union_out, dtype, case=f"{name}: merged vs the union call")
    return empty


def random_states(count, total_q, num_heads, head_dim, dtype, seed=0, device="cpu"):
    """Partial states with lse drawn near realistic values, some -inf, some (row, head) -inf in
    every state; outs randn / 3. On `device`."""
    generator = torch.Generator().manual_seed(seed)
    outs = [(torch.randn(total_q, num_heads, head_dim, generator=generator) / 3).to(dtype)
            for _ in range(count)]
    lses = [torch.randn(total_q, num_heads, generator=generator) * 3 + 4 for _ in range(count)]
    for i, lse in enumerate(lses):
        lse[torch.rand(total_q, num_heads, generator=generator) < 0.25] = -math.inf
        lse[i % total_q] = -math.inf  # one row where state i read nothing
    for lse in lses:
        lse[total_q // 2] = -math.inf  # one row where every state read nothing
    return [x.to(device) for x in outs], [x.to(device) for x in lses]


def merge_fp64(outs, lses):
    """The merge evaluated in float64 (out float64, lse float64)."""
    lse = torch.stack([x.double() for x in lses])
    m = lse.amax(0)
    empty = torch.isneginf(m)
    m = torch.where(empty, 0.0, m)
    weights = torch.exp(lse - m)
    total = weights.sum(0)
    out = sum((weights[i] / torch.where(empty, 1.0, total)).unsqueeze(-1) * outs[i].double()
              for i in range(len(outs)))
    return out, torch.where(empty, -math.inf, m + torch.log(total))


# ---------------------------------------------------------------------------------------------
# Merging partial calls equals one call over the union
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("parts", [2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
@pytest.mark.parametrize("case", sorted(CASES))
def test_merge_of_partials_is_the_union_call(case, dtype, parts):
    name = f"{case}-{DTYPE_IDS[dtype]}-parts{parts}"
    kwargs = build_split_case(case, dtype, seed=parts)
    union_out, union_lse = flashmsa.msa_sparse_attention(**kwargs, return_softmax_lse=True)
    pieces = split_q2k(kwargs["q2k_indices"], parts, seed=parts)
    outs, lses = partial_states(kwargs, pieces)
    empty_partials = torch.stack([torch.isneginf(lse) for lse in lses])
    merged, merged_lse = flashmsa.merge_attention_states(outs, lses)
    empty = check_merged(name, kwargs, merged, merged_lse, union_out, union_lse)
    # The case covers what it means to: (row, head)s where the union reads nothing, and where
    # it reads something but some partials read nothing.
    assert bool(empty.any()), f"[{name}] no (row, head) reads nothing"
    assert bool((empty_partials.any(0) & ~empty).any()), (
        f"[{name}] no (row, head) where only some partials read nothing")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS.get)
def test_in_place_out_and_lse_out(dtype):
    kwargs = build_split_case("causal_offset", dtype, seed=5)
    outs, lses = partial_states(kwargs, split_q2k(kwargs["q2k_indices"], 3, seed=5))
    want_out, want_lse = flashmsa.merge_attention_states(outs, lses)
    out = torch.full_like(outs[0], math.nan)
    lse_out = torch.full_like(lses[0], math.nan)
    got_out, got_lse = flashmsa.merge_attention_states(outs, lses, out=out, lse_out=lse_out)
    assert got_out is out and got_lse is lse_out, "out= and lse_out= must be returned"
    assert torch.equal(out, want_out) and torch.equal(lse_out, want_lse)
    # Into strided views of bigger buffers, one at a time.
    big = torch.full((outs[0].shape[0], outs[0].shape[1] + 2, 160), math.nan, dtype=dtype)
    view = big[:, 1:-1, 16:144]
    lse_big = torch.full((lses[0].shape[1], lses[0].shape[0]), math.nan)
    lse_view = lse_big.t()
    flashmsa.merge_attention_states(outs, lses, out=view)
    flashmsa.merge_attention_states(outs, lses, lse_out=lse_view)
    assert torch.equal(view, want_out) and torch.equal(lse_view, want_lse)
    assert bool(big[:, 0].isnan().all() and big[:, :, :16].isnan().all()), "wrote outside out"
    # Into the first partial itself.
    first_out, first_lse = outs[0].clone(), lses[0].clone()
    copies = [first_out] + outs[1:], [first_lse] + lses[1:]
    got_out, got_lse = flashmsa.merge_attention_states(*copies, out=first_out, lse_out=first_lse)
    assert got_out is first_out and got_lse is first_lse
    assert torch.equal(first_out, want_out) and torch.equal(first_lse, want_lse)


@pytest.mark.parametrize("dtype", DTYPES + (torch.float32,), ids=DTYPE_IDS.get)
def test_strided_and_stacked_inputs(dtype):
    outs, lses = random_states(3, 40, 5, 128, dtype, seed=2)
    want_out, want_lse = flashmsa.merge_attention_states(outs, lses)
    # Each partial a view with head and token strides of its own, lses transposed storage.
    wide = [torch.zeros(40, 7, 136, dtype=dtype) for _ in outs]
    views = []
    for buffer, partial in zip(wide, outs):
        buffer[:, 2:, 8:] = partial
        views.append(buffer[:, 2:, 8:])
    lse_views = [lse.t().contiguous().t() for lse in lses]
    got_out, got_lse = flashmsa.merge_attention_states(views, lse_views)
    assert torch.equal(got_out, want_out) and torch.equal(got_lse, want_lse)
    stacked = flashmsa.merge_attention_states(torch.stack(outs), torch.stack(lses))
    assert torch.equal(stacked[0], want_out) and torch.equal(stacked[1], want_lse)
    tupled = flashmsa.merge_attention_states(tuple(outs), tuple(lses))
    assert torch.equal(tupled[0], want_out) and torch.equal(tupled[1], want_lse)


# ---------------------------------------------------------------------------------------------
# The arithmetic
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("count", [1, 2, 5])
@pytest.mark.parametrize("dtype", DTYPES + (torch.float32,), ids=DTYPE_IDS.get)
def test_exact_to_fp32_accumulation(dtype, count):
    """Against the merge in float64 of the same inputs: fp32 outputs within a few fp32 ulps
    (relative to the largest partial), bf16/fp16 outputs within half an ulp of their dtype
    plus that."""
    outs, lses = random_states(count, 64, 4, 128, dtype, seed=count)
    got_out, got_lse = flashmsa.merge_attention_states(outs, lses)
    want_out, want_lse = merge_fp64(outs, lses)
    empty = torch.isneginf(want_lse)
    assert torch.equal(torch.isneginf(got_lse), empty)
    assert bool((got_out[empty] == 0).all())
    finite = ~empty
    lse_error = (got_lse.double() - want_lse)[finite].abs()
    assert lse_error.max().item() <= 4 * 2 ** -24 * want_lse[finite].abs().max().item() + 1e-7
    magnitude = torch.stack([x.double().abs() for x in outs]).amax(0)
    fp32_bound = 8 * count * 2 ** -24 * magnitude
    if dtype == torch.float32:
        bound = fp32_bound
    else:
        # Half an ulp: eps / 2 relative, or half the spacing of subnormals below the normals.
        eps, smallest_normal = torch.finfo(dtype).eps, torch.finfo(dtype).smallest_normal
        half_ulp = torch.clamp(want_out.abs(), min=smallest_normal) * eps / 2
        bound = half_ulp * (1 + 1e-6) + fp32_bound
    error = (got_out.double() - want_out).abs()
    assert bool((error <= bound).all()), (
        f"max error {error.max().item():.3e}, worst excess {(error - bound).max().item():.3e}")


@pytest.mark.parametrize("dtype", DTYPES + (torch.float32,), ids=DTYPE_IDS.get)
def test_one_state_is_itself(dtype):
    outs, lses = random_states(1, 33, 3, 128, dtype, seed=4)
    out, lse = flashmsa.merge_attention_states(outs, lses)
    empty = torch.isneginf(lses[0])
    assert torch.equal(lse, lses[0])
    assert torch.equal(out[~empty], outs[0][~empty])
    assert bool((out[empty] == 0).all())


def test_weightless_states_contribute_nothing_whatever_their_out_holds():
    """A partial with lse -inf (it read nothing), or whose weight underflows to 0, adds nothing,
    even when its out holds NaN or inf (an output nobody wrote)."""
    outs, lses = random_states(3, 16, 2, 128, torch.bfloat16, seed=6)
    lses[0][0, 0] = 1.0
    lses[2][0, 0] = -1e30  # finite, but exp(-1e30 - m) is 0 in fp32
    want_out, want_lse = flashmsa.merge_attention_states(outs, lses)
    dirty = [x.clone() for x in outs]
    for partial, lse in zip(dirty, lses):
        partial[torch.isneginf(lse)] = math.nan
    dirty[2][0, 0, :64] = math.inf
    for merge in ("library", "torch"):
        if merge == "library":
            out, lse = flashmsa.merge_attention_states(dirty, lses)
        else:
            out, lse = _merge_torch(dirty, lses, None, torch.empty_like(lses[0]))
        assert bool(torch.isfinite(out.float()).all()), f"{merge}: NaN/inf leaked from a state"
        assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse)), merge
    out, lse = flashmsa.merge_attention_states(dirty, lses)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("merge", ["library", "torch"])
def test_no_nan_for_extreme_finite_inputs(merge):
    big = torch.finfo(torch.float32).max
    lse_values = [[big, -big, 0.0], [-big, -big, -math.inf], [1e30, 1e30 - 1e24, -1e30],
                  [-1e30, -1e30, -1e30], [88.0, 89.0, -104.0], [-math.inf, -math.inf, 5.0]]
    lses = [torch.tensor([[row[i]] for row in lse_values], dtype=torch.float32)
            for i in range(3)]
    outs = [torch.full((len(lse_values), 1, 128), value, dtype=torch.float16)
            for value in (65504.0, -65504.0, 1.0)]
    if merge == "library":
        out, lse = flashmsa.merge_attention_states(outs, lses)
    else:
        out, lse = _merge_torch(outs, lses, None, torch.empty_like(lses[0]))
    assert bool(torch.isfinite(out.float()).all()) and bool(torch.isfinite(lse).all())
    want_out, want_lse = merge_fp64(outs, lses)
    assert torch.allclose(lse.double(), want_lse, rtol=1e-6, atol=1e-6)
    assert torch.allclose(out.double(), want_out, rtol=2e-3, atol=1e-3)


def test_torch_path_agrees_with_the_library():
    """The CUDA path's torch arithmetic (run here on CPU tensors) against the C entry."""
    for dtype in DTYPES + (torch.float32,):
        outs, lses = random_states(4, 50, 3, 128, dtype, seed=8)
        want_out, want_lse = flashmsa.merge_attention_states(outs, lses)
        got_out, got_lse = _merge_torch(outs, lses, None, torch.empty_like(lses[0]))
        assert got_out.dtype == dtype
        assert torch.equal(torch.isneginf(got_lse), torch.isneginf(want_lse))
        finite = ~torch.isneginf(want_lse)
        assert torch.allclose(got_lse[finite], want_lse[finite], rtol=1e-6, atol=1e-6)
        eps, smallest_normal = torch.finfo(dtype).eps, torch.finfo(dtype).smallest_normal
        ulp = torch.clamp(want_out.double().abs(), min=smallest_normal) * eps
        magnitude = torch.stack([x.double().abs() for x in outs]).amax(0)
        diff = (got_out.double() - want_out.double()).abs()
        assert bool((diff <= ulp + 64 * 2 ** -24 * magnitude).all()), dtype


def test_rows_do_not_depend_on_how_the_work_is_shared_out():
    """A call big enough to run on several threads gives bitwise what merges of row slices
    (each on one thread) give."""
    outs, lses = random_states(3, 1500, 8, 128, torch.bfloat16, seed=10)
    out, lse = flashmsa.merge_attention_states(outs, lses)
    for rows in (slice(0, 1), slice(1, 700), slice(700, 1500)):
        part_out, part_lse = flashmsa.merge_attention_states([x[rows] for x in outs],
                                                             [x[rows] for x in lses])
        assert torch.equal(part_out, out[rows]) and torch.equal(part_lse, lse[rows]), rows


def test_empty_shapes():
    for total_q, num_heads in ((0, 4), (3, 0)):
        outs = [torch.zeros(total_q, num_heads, 128, dtype=torch.bfloat16)] * 2
        lses = [torch.zeros(total_q, num_heads)] * 2
        out, lse = flashmsa.merge_attention_states(outs, lses)
        assert out.shape == outs[0].shape and lse.shape == lses[0].shape


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

def _states(count=2, total_q=6, num_heads=3, dtype=torch.bfloat16):
    return random_states(count, total_q, num_heads, 128, dtype, seed=9)


def _poisoned(outs, lses):
    return torch.full_like(outs[0], math.nan), torch.full_like(lses[0], math.nan)


def _error_cases():
    outs, lses = _states()
    half = [x.half() for x in outs]
    cases = {
        "no_states": (ValueError, "outs", [], []),
        "fewer_lses": (ValueError, "lses", outs, lses[:1]),
        "dtype_mismatch": (ValueError, "outs[1]", [outs[0], half[1]], lses),
        "float64_outs": (ValueError, "outs[0]", [x.double() for x in outs], lses),
        "rank": (ValueError, "outs[0]", [x[0] for x in outs], lses),
        "shape_mismatch": (ValueError, "outs[1]", [outs[0], outs[1][:-1]], lses),
        "head_dim_mismatch": (ValueError, "outs[1]", [outs[0], outs[1][..., :64]], lses),
        "last_dim_strided": (ValueError, "outs[1]",
                             [outs[0], torch.zeros(6, 3, 256, dtype=outs[0].dtype)[..., ::2]],
                             lses),
        "lse_dtype": (ValueError, "lses[0]", outs, [lses[0].double(), lses[1]]),
        "lse_bf16": (ValueError, "lses[1]", outs, [lses[0], lses[1].bfloat16()]),
        "lse_shape": (ValueError, "lses[1]", outs, [lses[0], lses[1][:, :2]]),
        "lse_device": (ValueError, "lses[0]", outs, [lses[0].to("meta"), lses[1]]),
        "outs_device": (ValueError, "outs[1]", [outs[0], outs[1].to("meta")], lses),
        "outs_not_a_sequence": (TypeError, "outs", 3, lses),
        "outs_entry_not_a_tensor": (TypeError, "outs[1]", [outs[0], "x"], lses),
        "lses_entry_not_a_tensor": (TypeError, "lses[0]", outs, [None, lses[1]]),
        "stacked_0d": (ValueError, "outs", torch.tensor(1.0), lses),
    }
    return cases


ERROR_CASES = _error_cases()


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_argument_errors(name):
    error, argument, outs, lses = ERROR_CASES[name]
    with pytest.raises(error) as caught:
        flashmsa.merge_attention_states(outs, lses)
    assert argument in str(caught.value), f"message does not name {argument}: {caught.value}"


@pytest.mark.parametrize("name,error,changes", [
    ("out", ValueError, dict(out=lambda o: o[:-1])),
    ("out", ValueError, dict(out=lambda o: o.half())),
    ("out", ValueError, dict(out=lambda o: torch.zeros(6, 3, 256, dtype=o.dtype)[..., ::2])),
    ("out", ValueError, dict(out=lambda o: o.to("meta"))),
    ("out", TypeError, dict(out=lambda o: o.tolist())),
    ("lse_out", ValueError, dict(lse_out=lambda l: l.double())),
    ("lse_out", ValueError, dict(lse_out=lambda l: l[:, :1])),
    ("lse_out", TypeError, dict(lse_out=lambda l: 0.0)),
], ids=lambda x: x if isinstance(x, str) else None)
def test_output_errors(name, error, changes):
    outs, lses = _states()
    out, lse_out = _poisoned(outs, lses)
    given = {"out": out, "lse_out": lse_out}
    for key, make in changes.items():
        given[key] = make(given[key])
    with pytest.raises(error) as caught:
        flashmsa.merge_attention_states(outs, lses, **given)
    assert name in str(caught.value), f"message does not name {name}: {caught.value}"
    for key in ("out", "lse_out"):
        if key not in changes:
            assert bool(given[key].isnan().all()), f"{key} was written by a failing call"


def test_unsupported_device_is_not_implemented():
    outs, lses = _states()
    with pytest.raises(NotImplementedError, match="meta"):
        flashmsa.merge_attention_states([x.to("meta") for x in outs],
                                        [x.to("meta") for x in lses])


# ---------------------------------------------------------------------------------------------
# The C entry through ctypes
# ---------------------------------------------------------------------------------------------

class CallArgs:
    """A flashmsa_merge_args for CPU tensors, with the arrays it points at kept alive."""

    def __init__(self, outs, lses, out, lse_out):
        count = len(outs)
        self.tensors = (outs, lses, out, lse_out)
        self.out_pointers = (ctypes.c_void_p * count)(*[x.data_ptr() for x in outs])
        self.lse_pointers = (ctypes.c_void_p * count)(*[x.data_ptr() for x in lses])
        self.strides = [(ctypes.c_int64 * count)(*[x.stride(dim) for x in tensors])
                        for tensors, dim in ((outs, 0), (outs, 1), (lses, 0), (lses, 1))]
        args = _lib.new_merge_args()
        args.num_states = count
        args.total_q, args.num_heads, args.head_dim = out.shape
        args.dtype = {torch.bfloat16: _lib.MERGE_DTYPE_BF16, torch.float16: _lib.MERGE_DTYPE_FP16,
                      torch.float32: _lib.MERGE_DTYPE_FP32}[out.dtype]
        args.partial_outs = ctypes.cast(self.out_pointers, ctypes.POINTER(ctypes.c_void_p))
        args.partial_lses = ctypes.cast(self.lse_pointers, ctypes.POINTER(ctypes.c_void_p))
        (args.partial_out_stride_token, args.partial_out_stride_head,
         args.partial_lse_stride_token, args.partial_lse_stride_head) = self.strides
        args.out = out.data_ptr()
        args.out_stride_token, args.out_stride_head = out.stride(0), out.stride(1)
        if lse_out is not None:
            args.lse = lse_out.data_ptr()
            args.lse_stride_token, args.lse_stride_head = lse_out.stride()
        self.args = args

    def call(self):
        lib = _lib.merge_library()
        status = lib.flashmsa_merge_attention_states(ctypes.byref(self.args))
        return status, lib.flashmsa_last_error().decode()


@pytest.mark.parametrize("dtype", DTYPES + (torch.float32,), ids=DTYPE_IDS.get)
def test_c_entry_directly(dtype):
    kwargs = build_split_case("full", torch.bfloat16, seed=3)
    outs, lses = partial_states(kwargs, split_q2k(kwargs["q2k_indices"], 2, seed=3))
    outs = [x.to(dtype) for x in outs]
    want_out, want_lse = flashmsa.merge_attention_states(outs, lses)
    out, lse_out = _poisoned(outs, lses)
    status, message = CallArgs(outs, lses, out, lse_out).call()
    assert status == _lib.OK and message == "", message
    assert torch.equal(out, want_out) and torch.equal(lse_out, want_lse)
    # lse is optional.
    out.fill_(math.nan)
    status, message = CallArgs(outs, lses, out, None).call()
    assert status == _lib.OK, message
    assert torch.equal(out, want_out)


def _mutations():
    """(name, field named in the message, status, mutation of a valid flashmsa_merge_args)."""
    def null(field):
        return lambda a: setattr(a, field, None)

    def set_to(field, value):
        return lambda a: setattr(a, field, value)

    def null_entry(array, index):
        return lambda a: getattr(a, array).__setitem__(index, None)

    invalid, not_supported = _lib.ERROR_INVALID_ARGUMENT, _lib.ERROR_NOT_SUPPORTED
    return [
        ("device", "device", invalid, set_to("device", 7)),
        ("device_index", "device_index", invalid,
         lambda a: (setattr(a, "device", _lib.DEVICE_CUDA), setattr(a, "device_index", -1))),
        ("num_states", "num_states", invalid, set_to("num_states", 0)),
        ("total_q", "total_q", invalid, set_to("total_q", -1)),
        ("num_heads", "num_heads", invalid, set_to("num_heads", -3)),
        ("head_dim", "head_dim", invalid, set_to("head_dim", -128)),
        ("dtype", "dtype", invalid, set_to("dtype", _lib.DTYPE_FP8_E4M3)),
        ("overflow", "overflows", invalid,
         lambda a: (setattr(a, "total_q", 1 << 40), setattr(a, "num_heads", 1 << 30))),
        ("partial_outs", "partial_outs", invalid, null("partial_outs")),
        ("partial_out_stride_token", "partial_out_stride_token", invalid,
         null("partial_out_stride_token")),
        ("partial_out_stride_head", "partial_out_stride_head", invalid,
         null("partial_out_stride_head")),
        ("partial_lses", "partial_lses", invalid, null("partial_lses")),
        ("partial_lse_stride_token", "partial_lse_stride_token", invalid,
         null("partial_lse_stride_token")),
        ("partial_lse_stride_head", "partial_lse_stride_head", invalid,
         null("partial_lse_stride_head")),
        ("partial_outs_entry", "partial_outs[1]", invalid, null_entry("partial_outs", 1)),
        ("partial_lses_entry", "partial_lses[0]", invalid, null_entry("partial_lses", 0)),
        ("out", "out", invalid, null("out")),
        ("cuda", "torch", not_supported, set_to("device", _lib.DEVICE_CUDA)),
    ]


MUTATIONS = _mutations()


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_c_entry_validation(mutation):
    _, field, status, mutate = mutation
    outs, lses = _states()
    out, lse_out = _poisoned(outs, lses)
    call = CallArgs(outs, lses, out, lse_out)
    mutate(call.args)
    got, message = call.call()
    assert got == status, f"status {got}, expected {status}: {message}"
    assert message.startswith(field) or field in message, message
    assert bool(out.isnan().all()) and bool(lse_out.isnan().all()), "a failing call wrote"
    # The next successful call clears the text.
    ok, message = CallArgs(outs, lses, out, lse_out).call()
    assert ok == _lib.OK and message == ""


def test_c_entry_null_args_and_init_defaults():
    lib = _lib.merge_library()
    assert lib.flashmsa_merge_attention_states(None) == _lib.ERROR_INVALID_ARGUMENT
    assert lib.flashmsa_last_error().decode().startswith("args")
    lib.flashmsa_merge_args_init(None)  # a no-op, not a crash
    args = _lib.MergeArgs()
    ctypes.memset(ctypes.byref(args), 0x5A, ctypes.sizeof(args))
    lib.flashmsa_merge_args_init(ctypes.byref(args))
    for name, _ in _lib.MergeArgs._fields_:
        value = getattr(args, name)
        assert not value, f"{name} defaults to {value!r}, expected 0 / NULL"
    assert args.device == _lib.DEVICE_CPU and args.dtype == _lib.MERGE_DTYPE_BF16


def test_python_errors_surface_the_library_text():
    """A failure inside the C entry reaches Python as the contract's exception type."""
    outs, lses = _states()
    args = CallArgs(outs, lses, *_poisoned(outs, lses)).args
    args.device = _lib.DEVICE_CUDA
    with pytest.raises(NotImplementedError, match="torch"):
        _lib.merge_attention_states(args)
    args.device, args.num_states = _lib.DEVICE_CPU, 0
    with pytest.raises(ValueError, match="num_states"):
        _lib.merge_attention_states(args)
