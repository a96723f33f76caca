"""The causal entry limit (msa_sparse_attention(..., causal_entry_limit=True), this project's
extension; the rule of vLLM's MiniMax-M3 kernels) on the CPU backend.

With causal=True and causal_entry_limit=True, a query row at causal position p reads only the
entries c of its index row q2k_indices[h, row, :] with c * 128 <= p: the first
min(topk, p // 128 + 1) entries, none when p < 0. Inside them the usual rules hold (the first
negative entry ends the row, ids past the request's blocks are ignored, repeats count once,
causal key masking). p is q_offset + i for an explicit q_offset (an int, or a per-request int32
tensor), seqlen_k - seqlen_q + i by default (end-aligned).

The defining property checked here: the result equals, bit for bit, the result without the
limit on a copy of q2k_indices whose entries c with c * 128 > p are -1 (masked_indices). The
same masked copy is evaluated by the independent fp64 reference (tests/torch_reference.py).

The index rows are built so that the limit matters (entry_limited_indices): where a row's limit
cuts, the entries it may read pick (with repeats, the odd -1 and the odd invisible or
out-of-range id) among half of its visible blocks, and the entries past the limit hold the
other half, distinct and visible. Each case asserts that the limit changes some rows' results
(the test can fail), and that rows whose masked copy equals their index row give the unlimited
call's result bitwise (the CPU backend computes rows independently). The helpers here are also
used by tests/gpu/test_gpu_causal_entry_limit.py.
"""
import ctypes
import math

import pytest
import torch

import flashmsa
from flashmsa import _lib
from flashmsa.api import _fill_args
from msa_inputs import HEAD_DIM, build_case, reference_kwargs
from torch_reference import check_close, reference_msa

BLOCK = 128
BF16, FP16 = torch.bfloat16, torch.float16
HUGE_ID = 2 ** 31 - 1


# ---------------------------------------------------------------------------------------------
# The rule, written from its definition
# ---------------------------------------------------------------------------------------------

def request_key_lengths(kwargs):
    """Declared seqlen_k of every request: seqused_k when paged, cu_seqlens_k's differences
    when flat."""
    if kwargs.get("page_table") is not None:
        return kwargs["seqused_k"].cpu().to(torch.int64).tolist()
    cu_k = kwargs["cu_seqlens_k"].cpu().to(torch.int64).tolist()
    return [end - begin for begin, end in zip(cu_k[:-1], cu_k[1:])]


def causal_positions(kwargs):
    """(total_q,) int64 causal position of every query row (contract section 5): q_offset + i
    for an int or per-request tensor q_offset, seqlen_k - seqlen_q + i without one."""
    cu_q = kwargs["cu_seqlens_q"].cpu().to(torch.int64).tolist()
    seqlens_k = request_key_lengths(kwargs)
    q_offset = kwargs.get("q_offset")
    positions = torch.zeros(cu_q[-1], dtype=torch.int64)
    for b, (begin, end) in enumerate(zip(cu_q[:-1], cu_q[1:])):
        if q_offset is None:
            first = seqlens_k[b] - (end - begin)
        elif isinstance(q_offset, int):
            first = q_offset
        else:
            first = int(q_offset.cpu()[b])
        positions[begin:end] = first + torch.arange(end - begin)
    return positions


def row_key_lengths(kwargs):
    """(total_q,) int64 declared seqlen_k of every query row's request."""
    cu_q = kwargs["cu_seqlens_q"].cpu().to(torch.int64)
    lengths = torch.tensor(request_key_lengths(kwargs), dtype=torch.int64)
    return torch.repeat_interleave(lengths, cu_q[1:] - cu_q[:-1])


def entries_read(positions, topk):
    """(total_q,) how many leading entries each row may read: min(topk, p // 128 + 1), 0 for
    p < 0 (Python's floor division: -1 // 128 + 1 = 0)."""
    return (positions // BLOCK + 1).clamp(0, topk)


def masked_indices(q2k, positions):
    """A copy of q2k with every entry c of row i such that c * 128 > positions[i] set to -1."""
    topk = q2k.shape[-1]
    slot = torch.arange(topk, dtype=torch.int64, device=q2k.device)
    keep = slot * BLOCK <= positions.to(q2k.device).unsqueeze(1)
    return torch.where(keep.unsqueeze(0), q2k, torch.full_like(q2k, -1)).contiguous()


def entry_limited_indices(positions, seqlens_k, num_kv_heads, topk, generator):
    """(Hkv, total_q, topk) int32 index rows under which the limit changes results.

    A row at position p with V visible blocks (those holding keys <= p of its request) and a
    limit of L = entries_read(p) entries orders its visible blocks at random; its first L
    entries pick among the first half (repeats likely), its entries past L hold the second half
    in turn (distinct, visible: reading them changes the result). Then a few entries within the
    limit are -1 (ending the row early), an invisible future block or an id past the request's
    blocks; a few past it are -1 or huge ids (none of which the limited call may look at). Rows
    that see nothing (p < 0, no keys) get random ids.
    """
    positions = positions.to(torch.int64)
    seqlens_k = seqlens_k.to(torch.int64)
    rows = positions.numel()
    num_blocks = (seqlens_k + BLOCK - 1) // BLOCK
    width = max(int(num_blocks.max()) if rows else 1, 1)
    visible = torch.minimum((positions // BLOCK + 1).clamp(min=0), num_blocks)  # (R,)
    limit = entries_read(positions, topk)  # (R,)

    def rand(*shape):
        return torch.rand(*shape, generator=generator)

    block = torch.arange(width)
    keys = rand(num_kv_heads, rows, width) + (block >= visible.unsqueeze(1)) * 2.0
    order = keys.argsort(-1)  # visible blocks first, in random order
    half = ((visible + 1) // 2).clamp(min=1)  # (R,)
    rest = (visible - half).clamp(min=1)
    slot = torch.arange(topk)
    within = slot < limit.unsqueeze(1)  # (R, topk)
    early = (rand(num_kv_heads, rows, topk) * half.view(1, -1, 1)).long()
    late = half.view(1, -1, 1) + ((slot - limit.unsqueeze(1)).clamp(min=0) % rest.unsqueeze(1))
    late = torch.where((visible > half).view(1, -1, 1), late, early)
    pick = torch.where(within.unsqueeze(0), early, late.expand_as(early)).clamp(max=width - 1)
    ids = order.gather(-1, pick)

    noise = rand(num_kv_heads, rows, topk)
    future = (visible.view(1, -1, 1) + (rand(num_kv_heads, rows, topk) * 3).long())
    ids = torch.where(within & (noise < 0.03), -1, ids)
    ids = torch.where(within & (noise >= 0.03) & (noise < 0.07), future, ids)
    ids = torch.where(~within & (noise < 0.04), -1, ids)
    ids = torch.where(~within & (noise >= 0.04) & (noise < 0.07), HUGE_ID, ids)
    blind = (visible == 0).view(1, -1, 1)
    anything = (rand(num_kv_heads, rows, topk) * (num_blocks.view(1, -1, 1) + 2)).long()
    ids = torch.where(blind, anything, ids)
    return ids.to(torch.int32).contiguous()


def expected_differences(q2k, positions, seqlens_k):
    """(total_q,) bool: rows for which some KV head's limited selection (entries within the
    limit, up to the first negative, existing and visible blocks) differs from its unlimited
    one, by the contract's rules on the host."""
    limited = _selection(masked_indices(q2k, positions), positions, seqlens_k)
    unlimited = _selection(q2k, positions, seqlens_k)
    return (limited != unlimited).any(-1).any(0)


def _selection(q2k, positions, seqlens_k):
    ids = q2k.cpu().to(torch.int64)
    num_blocks = (seqlens_k.to(torch.int64) + BLOCK - 1) // BLOCK
    visible = torch.minimum((positions // BLOCK + 1).clamp(min=0), num_blocks)
    width = max(int(num_blocks.max()), 1)
    before_end = torch.cumprod((ids >= 0).to(torch.int64), -1).bool()
    valid = before_end & (ids < visible.view(1, -1, 1))
    selected = torch.zeros(*ids.shape[:2], width + 1, dtype=torch.bool)
    selected.scatter_(-1, torch.where(valid, ids, width), True)
    return selected[..., :width]


# ---------------------------------------------------------------------------------------------
# Running and comparing
# ---------------------------------------------------------------------------------------------

def call(kwargs, **options):
    """One call with return_softmax_lse into a NaN-poisoned out= buffer: (out, lse)."""
    q = kwargs["q"]
    out = torch.full(q.shape, math.nan, dtype=q.dtype, device=q.device)
    got, lse = flashmsa.msa_sparse_attention(**kwargs, return_softmax_lse=True, out=out,
                                             **options)
    assert got is out, "msa_sparse_attention did not return the out= tensor"
    return got, lse


def bits(x):
    """x's bits as integers (torch.equal then compares bit for bit: NaN equals NaN, -0 does not
    equal 0; float8 tensors have no torch.equal kernel)."""
    if x.dtype == torch.float8_e4m3fn:
        return x.view(torch.uint8)
    if x.dtype in (BF16, FP16):
        return x.view(torch.int16)
    if x.dtype == torch.float32:
        return x.view(torch.int32)
    return x


def assert_bitwise(name, what, got, want):
    for part, a, b in zip(("out", "lse"), got, want):
        same = torch.equal(bits(a), bits(b))
        if not same:
            differ = bits(a) != bits(b)
            raise AssertionError(f"[{name}] {part}: {what}: not bitwise equal "
                                 f"({int(differ.sum())} of {a.numel()} elements differ)")


def rows_differ(got, want):
    """(total_q,) bool: rows whose out or lse differ bitwise."""
    out_differ = (bits(got[0]) != bits(want[0])).flatten(1).any(1)
    lse_differ = (bits(got[1]) != bits(want[1])).any(1)
    return out_differ | lse_differ


def check_entry_limit(name, kwargs, expect_cut=True, row_independent=True):
    """Every check of one case (kwargs: the call's arguments, causal=True, without
    causal_entry_limit). Returns (limited result, positions)."""
    assert kwargs["causal"] is True, f"[{name}] the entry limit needs causal=True"
    positions = causal_positions(kwargs)
    q2k = kwargs["q2k_indices"]
    masked = masked_indices(q2k, positions)
    inputs = {key: value.clone() for key, value in kwargs.items()
              if isinstance(value, torch.Tensor)}

    limited = call(kwargs, causal_entry_limit=True)
    for key, value in inputs.items():
        assert torch.equal(bits(kwargs[key]), bits(value)), (
            f"[{name}] input {key} changed during the call")
    finite = torch.isfinite(limited[0].float())
    assert bool(finite.all()), (f"[{name}] out has {int((~finite).sum())} NaN/inf elements "
                                f"(unwritten or poisoned)")

    # (a) The defining property: bitwise the unlimited call on the masked copy.
    on_masked = call(dict(kwargs, q2k_indices=masked), causal_entry_limit=False)
    assert_bitwise(name, "causal_entry_limit=True vs False on the masked q2k_indices", limited,
                   on_masked)

    # (b) The oracle on the masked copy.
    reference = reference_kwargs(dict(kwargs, q2k_indices=masked))
    ref_out, ref_lse, _ = reference_msa(**reference)
    plain = reference_msa(**reference, compute_dtype=kwargs["q"].dtype)[0]
    check_close(limited[0], ref_out, kwargs["q"].dtype, lse=limited[1], ref_lse=ref_lse,
                baseline=plain, case=f"{name} vs fp64 reference on the masked q2k_indices")

    # Rows at negative positions read nothing: out exactly 0, lse -inf.
    negative = positions < 0
    if bool(negative.any()):
        assert bool((limited[0][negative] == 0).all()), (
            f"[{name}] rows at negative positions must have out exactly 0")
        assert bool(torch.isneginf(limited[1][negative]).all()), (
            f"[{name}] rows at negative positions must have lse -inf")

    # The limit matters: some rows' results differ from the unlimited call's.
    unlimited = call(kwargs, causal_entry_limit=False)
    differ = rows_differ(limited, unlimited)
    selection_differs = expected_differences(q2k, positions, row_key_lengths(kwargs))
    if expect_cut:
        assert bool(selection_differs.any()), (
            f"[{name}] the case's index rows never let the limit change a selection")
        assert bool(differ.any()), (
            f"[{name}] causal_entry_limit=True gave the unlimited result on every row, though "
            f"{int(selection_differs.sum())} rows select other blocks under the limit")
    if row_independent:
        # Rows whose selection the limit leaves alone give the unlimited result bitwise; rows
        # whose selection it changes give another result.
        same_rows = ~selection_differs
        assert not bool(differ[same_rows].any()), (
            f"[{name}] {int(differ[same_rows].sum())} rows whose selection the limit does not "
            f"change differ from the unlimited call (first: row "
            f"{int(same_rows.nonzero()[differ[same_rows]][0])})")
        assert bool(differ[selection_differs].all()), (
            f"[{name}] {int((~differ[selection_differs]).sum())} rows whose selection the limit "
            f"changes gave the unlimited result")
    return limited, positions


def make_kwargs(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, *, q_offset=None,
                layout="flat", dtype=BF16, kv_dtype=None, seed=0):
    """build_case's inputs (fresh randn / 3 data, causal) with entry_limited_indices."""
    kwargs = build_case(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, True,
                        q_dtype=dtype, kv_dtype=kv_dtype, layout=layout, q_offset=q_offset,
                        seed=seed)
    generator = torch.Generator().manual_seed(seed + 7919)
    kwargs["q2k_indices"] = entry_limited_indices(
        causal_positions(kwargs), row_key_lengths(kwargs), num_kv_heads, topk, generator)
    return kwargs


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

# (id, q lens, k lens, Hq, Hkv, topk, q_offset, layout, q dtype, kv dtype, the limit cuts)
CASES = [
    # End-aligned: request 0's prefix (3000 - 64) is far past 128 x 16 (the limit is topk),
    # request 1 is a prefill from scratch (positions 0-299: 1-3 entries), 2 a short chunk after
    # 695 keys (6 entries), 3 a decode at position 128 (2 entries), 4 has no query rows.
    ("end-aligned-topk16-flat-bf16", [64, 300, 5, 1, 0], [3000, 300, 700, 129, 500], 8, 2, 16,
     None, "flat", BF16, None, True),
    ("end-aligned-topk16-paged-fp16", [64, 300, 5, 1, 0], [3000, 300, 700, 129, 500], 8, 2, 16,
     None, "paged", FP16, None, True),
    # Scalar offset 100: positions 100-499 (1-4 entries) over 1200 keys, 100-149 over 700.
    ("scalar-offset100-topk4-flat-bf16", [400, 50], [1200, 700], 4, 1, 4, 100, "flat", BF16,
     None, True),
    ("scalar-offset100-topk4-paged-fp16", [400, 50], [1200, 700], 4, 1, 4, 100, "paged", FP16,
     None, True),
    # Scalar offset -50: the first 50 rows of each request read nothing; topk 1 reads entry 0
    # at every position >= 0, so the limit never changes a result there.
    ("scalar-offset-50-topk1-paged-bf16", [100, 30], [600, 900], 4, 2, 1, -50, "paged", BF16,
     None, False),
    # Per-request offsets: -130 (130 rows at negative positions, then 1 entry), 0 (1-2 entries),
    # 2500 (past 128 x 16: the limit is topk), 60 over 64 keys (one block).
    ("tensor-offset-topk16-paged-bf16", [200, 150, 20, 3], [500, 1500, 2600, 64], 16, 2, 16,
     [-130, 0, 2500, 60], "paged", BF16, None, True),
    ("tensor-offset-topk16-flat-fp16", [200, 150, 20, 3], [500, 1500, 2600, 64], 16, 2, 16,
     [-130, 0, 2500, 60], "flat", FP16, None, True),
    # topk 64 (the most): positions 8800+ over 9000 keys and 8300+ over 8400 keys read all 64
    # entries; 0-129 over 2000 keys 1-2, 4000-4019 over 5000 keys 32.
    ("tensor-offset-topk64-flat-fp16", [3, 130, 40, 20], [9000, 2000, 8400, 5000], 4, 2, 64,
     [8800, 0, 8300, 4000], "flat", FP16, None, True),
    ("tensor-offset-topk64-paged-bf16", [3, 130, 40, 20], [9000, 2000, 8400, 5000], 4, 2, 64,
     [8800, 0, 8300, 4000], "paged", BF16, None, True),
    # A decode batch: one row per request at the end of 1 .. 3000 keys (1 to 16 entries).
    ("decode-batch-topk16-paged-bf16", [1] * 12,
     [1, 127, 128, 129, 300, 640, 1000, 1500, 2047, 2048, 2049, 3000], 16, 1, 16, None, "paged",
     BF16, None, True),
    # fp8 K/V with bf16 q (global descales).
    ("end-aligned-topk16-paged-bf16-fp8kv", [128, 1, 9], [128, 1000, 2100], 16, 1, 16, None,
     "paged", BF16, "fp8", True),
]


@pytest.mark.parametrize("spec", CASES, ids=[spec[0] for spec in CASES])
def test_entry_limit_equals_masked_indices(spec):
    (name, seqlens_q, seqlens_k, hq, hkv, topk, q_offset, layout, dtype, kv_dtype,
     expect_cut) = spec
    kwargs = make_kwargs(seqlens_q, seqlens_k, hq, hkv, topk, q_offset=q_offset, layout=layout,
                         dtype=dtype, kv_dtype=kv_dtype, seed=sum(map(ord, name)))
    check_entry_limit(name, kwargs, expect_cut=expect_cut)


@pytest.mark.parametrize("q_offset", [None, 700, "tensor"], ids=["end-aligned", "int", "tensor"])
def test_limit_cuts_exactly_where_the_position_says(q_offset):
    """One KV head, topk 16, entry c holding block (c + 1) % 16: a row at position p with
    L = min(16, p // 128 + 1) reads blocks 1 .. L - 1 (block L holds no key <= p), so it misses
    block 0 unless L = 16, and reads nothing at p < 128. Checked against the fp64 reference on
    an index row of those blocks alone, the position counted the way q_offset says, and with
    check_entry_limit."""
    name = f"exact-cut-{q_offset}"
    seqlens_q, seqlens_k = [600, 300], [2600, 2100]
    offset = [1500, 1100] if q_offset == "tensor" else q_offset
    kwargs = build_case(seqlens_q, seqlens_k, 2, 1, 16, True, q_offset=offset, seed=41)
    total_q = sum(seqlens_q)
    slot = torch.arange(16)
    rotated = ((slot + 1) % 16).to(torch.int32)
    kwargs["q2k_indices"] = rotated.expand(1, total_q, 16).contiguous()
    positions = torch.cat([first + torch.arange(length) for first, length in zip(
        [k - q for q, k in zip(seqlens_q, seqlens_k)] if offset is None
        else [offset] * 2 if isinstance(offset, int) else offset, seqlens_q)])
    limit = (positions // 128 + 1).clamp(max=16)
    explicit = torch.where(slot < limit.unsqueeze(1), rotated, -1).to(torch.int32).unsqueeze(0)
    limited = call(kwargs, causal_entry_limit=True)
    ref_out, ref_lse, _ = reference_msa(**reference_kwargs(dict(kwargs, q2k_indices=explicit)))
    check_close(limited[0], ref_out, kwargs["q"].dtype, lse=limited[1], ref_lse=ref_lse,
                case=f"{name} vs fp64 reference on blocks 1 .. L - 1")
    assert bool((limit < 16).any()), f"[{name}] the case must have rows that the limit cuts"
    check_entry_limit(name, kwargs)


def test_entry_limit_needs_causal():
    """causal_entry_limit=True with causal=False is a ValueError naming causal_entry_limit;
    causal_entry_limit=False with causal=False runs."""
    kwargs = build_case([20, 7], [400, 300], 4, 2, 8, False, seed=5)
    with pytest.raises(ValueError) as raised:
        flashmsa.msa_sparse_attention(**kwargs, causal_entry_limit=True)
    assert "causal_entry_limit" in str(raised.value), (
        f"[causal=False] the ValueError must name causal_entry_limit, got: {raised.value}")
    out = flashmsa.msa_sparse_attention(**kwargs, causal_entry_limit=False)
    assert bool(torch.isfinite(out.float()).all()), "[causal=False, no limit] out not finite"


def _c_args(kwargs, causal, causal_entry_limit):
    q = kwargs["q"]
    out = torch.full(q.shape, math.nan, dtype=q.dtype)
    lse = torch.empty(q.shape[:2])
    args = _fill_args(
        q, kwargs["k"], kwargs["v"], kwargs["q2k_indices"], kwargs["cu_seqlens_q"],
        kwargs.get("cu_seqlens_k"), kwargs.get("page_table"), kwargs.get("seqused_k"), None, None,
        None, None, causal, HEAD_DIM ** -0.5, 1.0, 1.0, 1.0, out, lse, None, None, None,
        causal_entry_limit)
    return args, (out, lse)


def _c_call(args):
    library = _lib.library()
    status = library.flashmsa_sparse_attention(ctypes.byref(args))
    return status, library.flashmsa_last_error().decode()


def test_c_abi_validates_causal_entry_limit():
    """The C entry point: causal_entry_limit = 1 with causal = 0, and a value other than 0 or 1,
    are FLASHMSA_ERROR_INVALID_ARGUMENT naming the field; causal_entry_limit = 1 with causal = 1
    gives the Python call's result bitwise."""
    kwargs = make_kwargs([30, 9], [500, 260], 4, 2, 8, layout="paged", seed=6)
    for causal, value in ((False, 1), (True, 2), (True, -1)):
        args, _ = _c_args(kwargs, causal, False)
        args.causal_entry_limit = value
        status, message = _c_call(args)
        assert status == _lib.ERROR_INVALID_ARGUMENT and "causal_entry_limit" in message, (
            f"[C causal={int(causal)} causal_entry_limit={value}] expected an invalid-argument "
            f"error naming causal_entry_limit, got status {status}: {message}")
    args, got = _c_args(kwargs, True, True)
    status, message = _c_call(args)
    assert status == _lib.OK, f"[C causal=1 causal_entry_limit=1] status {status}: {message}"
    assert_bitwise("C causal_entry_limit=1", "C call vs Python call", got,
                   call(kwargs, causal_entry_limit=True))
