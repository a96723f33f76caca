"""Per-(KV head, token slot) fp8 scales on the Hopper kernels (docs/contract.md section 6, this
project's extension): float8_e4m3fn K/V with float32 `k_scale` / `v_scale` of shape
(Hkv, num_slots), the slot of paged (page p, token t) being p * 128 + t and of flat key row r
being r; a key is e4m3 * k_scale[h, slot] * k_global_scale, a value likewise.

Every kernel path, each a named shape of PATHS (its kernel asserted through the profiler by
test_path_takes_its_kernel):
- one-token: the one-token decode kernel, batch 40 of one token, MiniMax-M3 heads (Hq 64 /
  Hkv 4), no KV split;
- multi-row-decode-kernel: 8-token multi-token prediction at batch 4 (rows x KV heads fit the
  SMs), the one-token kernel; multi-row-decode-kernel-b32: at batch 32 (MiniMax-M3's), which fp8
  takes to the one-token kernel too (one CTA a row, two per SM);
- one-token-splits: batch 2 at 100000 and 33001 keys, topk 32: the one-token kernel with KV
  splits reduced in a thread-block cluster; one-token-splits-workspace: the same, its splits
  merged from the workspace (launch override cluster=0, the merge kernel);
- one-consumer-mtp4: 4-token multi-token prediction at batch 34 under q's dtype's routing
  (launch override decode_kernel=1), the prefill kernel's one-consumer shape (what groups of
  more than 16 heads take); one-consumer-splits-topk64: batch 2 at 70000 and 40001 keys, topk
  64 (past the one-token kernel), the one-consumer shape with cluster splits;
- two-consumer-mtp8: 8-token multi-token prediction at batch 32 under q's dtype's routing
  (decode_kernel=1), the prefill kernel's two-consumer path, one tile a request;
  two-consumer-splits: 8 tokens at batch 2 over 40000 and 9000 keys kept off the one-token
  kernel (decode_kernel=0), the two-consumer split launch and its merge kernel;
- two-consumer-prefill: long ragged prefill chunks (384, 0, 150, 77 rows), TP 4 heads
  (Hq 16 / Hkv 1); two-consumer-long-prefill: chunks of 300, 0, 150, 77 rows on up to 40000
  keys, MiniMax-M3 heads. Both, like two-consumer-mtp8 and -splits, run the token-warp consumer
  (token_warp_consumer.cuh), which fp8 takes in the two-consumer kernel;
- two-consumer-union-tile: two-consumer-prefill's shape through the union tile's rewrite and
  staged scales (launch override token_warps=0).

Inputs are fresh random data (q, logical K/V randn / 3) drawn on the device per case; the
per-token scales are 2 ** U(-4, 4) times a mantissa in [1, 2), so a scale taken from the wrong
slot or KV head is off by up to 2^9, and K/V are stored as e4m3(logical / (token scale x global
scale)) so that the dequantised values stay near randn / 3 (global scales 0.043 and 0.059, not
powers of two). Index rows hold repeats, ids past every block and early -1s; paged K/V sit on
shuffled pages with spare ones; every scale slot that holds no key is NaN. Outputs are
poisoned with NaN before each call.

Tests, for every path:
- test_matches_cpu_backend_and_reference (q bf16 and fp16): scales on K only, V only and both,
  each with float and with device-resident (one-element float32 CUDA tensor) global scales,
  flat and paged: every paged result equals the flat one bitwise, and one of the two (in turn)
  is compared, out, lse and temperature lse, with the CPU backend on the same arguments moved
  to the CPU and with torch_reference.reference_msa on the dequantised logical K/V (contract
  section 7, with its bound against the plain evaluation in q's dtype);
- test_unit_scales_give_the_unscaled_bits: all-ones k_scale, v_scale or both give bitwise the
  call without them, flat and paged;
- test_graph_replay_reads_scales_in_place: a call captured in a CUDA graph replays equal to an
  eager call bitwise, also after new scale values are written into the captured tensors (and
  then right against the reference for those values);
- test_unread_slots_are_never_read: NaN in the scale slots at or past each request's end
  (flat: past total_k; paged: the rest of each last page, the spare pages, the slots past
  num_pages * 128) gives the bits of the same call with finite values there;
- test_strided_scale_rows: scales as views of wider NaN-filled tensors (row strides that are
  not the slot count, differing between k_scale and v_scale, a storage offset) give the
  contiguous tensors' bits, and are right;
- test_path_takes_its_kernel: the launched kernel (and consumer count, and merge kernel) is the
  one the path is named for.

The case builder, the calls and the comparisons run on CPU tensors too (device="cpu"; the CPU
backend then stands in for the kernels), which is how the oracle logic here was checked.
"""
import contextlib
import math
import re

import pytest
import torch

import flashmsa
import flashmsa.testing
from flashmsa.patterns import make_q2k
from gpu_harness import (DEVICE, REFERENCE_ROWS_PER_CHUNK, assert_bitwise, capture_graph,
                         dtype_id, replay, to_device)
from torch_reference import check_close, reference_msa

pytestmark = pytest.mark.kv_quant_gpu

FP8 = torch.float8_e4m3fn
E4M3_MAX = 448.0
BF16, FP16 = torch.bfloat16, torch.float16
BLOCK = 128
HEAD_DIM = 128
M3 = (64, 4)            # MiniMax-M3: Hq 64, Hkv 4
TP4 = (16, 1)           # M3 at tensor parallelism 4
K_GLOBAL_SCALE = 0.043  # not powers of two: a scale applied twice or not at all shows
V_GLOBAL_SCALE = 0.059
TEMPERATURE = 0.6
SCALE_OCTAVES = 4       # token scales 2 ** U(-4, 4) * U[1, 2)
SPARE_PAGES = 3         # pages no request owns
EXTRA_SLOTS = 37        # slots past num_pages * 128 (paged) or total_k (flat), never read
SCALED = ("k", "v", "both")
FORMS = ("float", "device")  # the global scales as floats or one-element tensors on q's device


class Path:
    """One kernel path: the shape that takes it and what the profiler must see launched."""

    def __init__(self, q_lens, k_lens, heads, topk, kernel, *, consumers=None, merge=False,
                 overrides=None, seed):
        self.q_lens, self.k_lens, self.heads, self.topk = q_lens, k_lens, heads, topk
        self.kernel, self.consumers, self.merge = kernel, consumers, merge
        self.overrides = overrides or {}
        self.seed = seed


# Ragged key lengths: empty, one key, around block edges, a few thousand.
SHORT_LENGTHS = [9000, 0, 127, 4097, 129, 2000, 256, 1, 5000, 300]
MTP_LENGTHS = [3000, 0, 129, 4097, 7, 1000, 300, 2049]


def _cycle(pool, count):
    return [pool[i % len(pool)] for i in range(count)]


# Which kernel takes a shape (launch_plan.cpp, split_rules.h; an H200's 132 SMs): the one-token
# kernel takes groups of <= 16 heads at topk <= 32 for calls of <= 8 rows a request (fp8's
# routing; q's dtype's, decode_kernel=1, only one row a request or rows x KV heads that fit the
# SMs); the one-consumer shape calls of at most 64 / group rows a request on average (4 at
# MiniMax-M3's group of 16, so its 8-token MTP at batch 32 is a two-consumer call under q's
# dtype's routing); the two-consumer kernel the rest. Splits come where the (tile, KV head)
# units leave the SMs' CTA slots mostly idle.
PATHS = {
    "one-token": Path([1] * 40, _cycle(SHORT_LENGTHS, 40), M3, 16, "decode_kernel", seed=1),
    "multi-row-decode-kernel": Path([8] * 4, [30000, 4097, 129, 9000], M3, 16,
                                    "decode_kernel", seed=2),
    "one-token-splits": Path([1, 1], [100000, 33001], M3, 32, "decode_kernel", seed=3),
    "one-token-splits-workspace": Path([1, 1], [100000, 33001], M3, 32, "decode_kernel",
                                       merge=True, overrides=dict(cluster=0), seed=4),
    "multi-row-decode-kernel-b32": Path([8] * 32, _cycle(MTP_LENGTHS, 32), M3, 16,
                                        "decode_kernel", seed=12),
    "one-consumer-mtp4": Path([4] * 34, _cycle(MTP_LENGTHS, 34), M3, 16, "prefill_kernel",
                              consumers=1, overrides=dict(decode_kernel=1), seed=5),
    "one-consumer-splits-topk64": Path([1, 1], [70000, 40001], M3, 64, "prefill_kernel",
                                       consumers=1, seed=6),
    "two-consumer-mtp8": Path([8] * 32, _cycle(MTP_LENGTHS, 32), M3, 16, "prefill_kernel",
                              consumers=2, overrides=dict(decode_kernel=1), seed=7),
    "two-consumer-splits": Path([8, 8], [40000, 9000], M3, 16, "prefill_kernel", consumers=2,
                                merge=True, overrides=dict(decode_kernel=0), seed=8),
    "two-consumer-prefill": Path([384, 0, 150, 77], [4000, 129, 1500, 77], TP4, 16,
                                 "prefill_kernel", consumers=2, seed=9),
    "two-consumer-long-prefill": Path([300, 0, 150, 77], [40000, 129, 15000, 2000], M3, 16,
                                      "prefill_kernel", consumers=2, seed=10),
    "two-consumer-union-tile": Path([384, 0, 150, 77], [4000, 129, 1500, 77], TP4, 16,
                                    "prefill_kernel", consumers=2,
                                    overrides=dict(token_warps=0), seed=11),
}
PATH_NAMES = sorted(PATHS)


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

class Data:
    """The logical inputs of one path: q, K, V (randn / 3), per-token scales for every key,
    indices, and where each key lives on the shuffled pages, all on `device`."""

    def __init__(self, path, dtype, device=DEVICE, seed_offset=0):
        self.path, self.dtype, self.device = path, dtype, torch.device(device)
        seed = 1000 * path.seed + 10 * seed_offset + (dtype == FP16)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        hq, hkv = path.heads
        self.num_kv_heads = hkv
        self.q_lens, self.k_lens = path.q_lens, path.k_lens
        self.total_q, self.total_k = sum(path.q_lens), sum(path.k_lens)
        self.cu_q = _prefix(path.q_lens, self.device)
        self.cu_k = _prefix(path.k_lens, self.device)
        self.q = (self.randn(self.total_q, hq, HEAD_DIM) / 3).to(dtype)
        self.k = self.randn(self.total_k, hkv, HEAD_DIM) / 3
        self.v = self.randn(self.total_k, hkv, HEAD_DIM) / 3
        self.k_token = self.token_scales(self.total_k)
        self.v_token = self.token_scales(self.total_k)
        self.q2k = _with_garbage(make_q2k("random", path.q_lens, path.k_lens, hkv, path.topk,
                                          causal=True, seed=seed, device=self.device))
        self._noise = {}
        self._paging()

    def randn(self, *shape):
        return torch.randn(*shape, generator=self.generator, device=self.device)

    def rand(self, *shape):
        return torch.rand(*shape, generator=self.generator, device=self.device)

    def token_scales(self, count):
        """(Hkv, count) scales 2 ** U(-4, 4) x U[1, 2)."""
        octave = self.rand(self.num_kv_heads, count) * (2 * SCALE_OCTAVES) - SCALE_OCTAVES
        return torch.exp2(octave) * (1 + self.rand(self.num_kv_heads, count))

    def _paging(self):
        blocks = [-(-n // BLOCK) for n in self.k_lens]
        self.num_pages = sum(blocks) + SPARE_PAGES
        order = torch.randperm(self.num_pages, generator=self.generator,
                               device=self.device).to(torch.int32)
        table = torch.full((len(blocks), max(blocks) + 1), -1, dtype=torch.int32,
                           device=self.device)
        taken = 0
        for b, n in enumerate(blocks):
            table[b, :n] = order[taken:taken + n]
            taken += n
        self.page_table = table
        self.seqused_k = torch.tensor(self.k_lens, dtype=torch.int32, device=self.device)
        self.key_page, self.key_token = key_locations(table, self.seqused_k)
        self.key_slot = self.key_page * BLOCK + self.key_token

    def stored(self, which, scaled):
        """K or V as e4m3(logical / (token scale x global scale)), flat (total_k, Hkv, D); the
        token scale only where `which` takes per-token scales."""
        logical, token, global_scale = ((self.k, self.k_token, K_GLOBAL_SCALE) if which == "k"
                                        else (self.v, self.v_token, V_GLOBAL_SCALE))
        x = logical / global_scale
        if which in scaled_set(scaled):
            x = x / token.t()[:, :, None]
        return x.clamp(-E4M3_MAX, E4M3_MAX).to(FP8)

    def noise_pages(self, which):
        """Finite fp8 noise for every page of K or V (drawn once, a fresh copy each call): the
        tails of last pages and the spare pages hold it."""
        if which not in self._noise:
            shape = (self.num_pages, self.num_kv_heads, BLOCK, HEAD_DIM)
            self._noise[which] = (self.randn(*shape) * 3).clamp(-E4M3_MAX, E4M3_MAX).to(FP8)
        return self._noise[which].clone()

    def scale_table(self, token, layout, unread="nan", view="contiguous", padding=5):
        """(Hkv, num_slots) per-token scales holding token[:, r] at the slot of key r; the
        other slots NaN (unread="nan") or finite random scales (unread="finite"). view="wide":
        a view of a wider NaN tensor, at storage offset 3, whose row stride is num_slots + 3 +
        padding."""
        hkv = self.num_kv_heads
        slots = (self.num_pages * BLOCK if layout == "paged" else self.total_k) + EXTRA_SLOTS
        if unread == "nan":
            table = torch.full((hkv, slots), math.nan, device=self.device)
        else:
            table = self.token_scales(slots)
        if layout == "paged":
            table[:, self.key_slot] = token
        else:
            table[:, :self.total_k] = token
        if view == "contiguous":
            return table
        front = 3
        wide = torch.full((hkv, front + slots + padding), math.nan, device=self.device)
        placed = wide[:, front:front + slots]
        placed.copy_(table)
        return placed

    def case(self, layout, scaled, form="float", unread="nan", view="contiguous", name=None):
        """The call's keyword arguments (output excluded) for one variant. scaled: "k", "v",
        "both" (which take per-token scales) or "none"; form: "float" or "device"."""
        k, v = self.stored("k", scaled), self.stored("v", scaled)
        kwargs = dict(q=self.q, q2k_indices=self.q2k, cu_seqlens_q=self.cu_q, causal=True,
                      lse_temperature_scale=TEMPERATURE)
        if form == "float":
            kwargs.update(k_global_scale=K_GLOBAL_SCALE, v_global_scale=V_GLOBAL_SCALE)
        elif form == "device":
            kwargs.update(
                k_global_scale=torch.tensor(K_GLOBAL_SCALE, dtype=torch.float32,
                                            device=self.device),
                v_global_scale=torch.full((1,), V_GLOBAL_SCALE, dtype=torch.float32,
                                          device=self.device))
        else:
            raise ValueError(f"unknown global-scale form {form!r}")
        if layout == "paged":
            pages = []
            for which, flat in (("k", k), ("v", v)):
                paged = self.noise_pages(which)
                paged.view(torch.uint8)[self.key_page, :, self.key_token] = flat.view(torch.uint8)
                pages.append(paged)
            kwargs.update(k=pages[0], v=pages[1], page_table=self.page_table,
                          seqused_k=self.seqused_k)
        elif layout == "flat":
            kwargs.update(k=k, v=v, cu_seqlens_k=self.cu_k)
        else:
            raise ValueError(f"unknown layout {layout!r}")
        for which, token, padding in (("k", self.k_token, 5), ("v", self.v_token, 44)):
            if which in scaled_set(scaled):
                kwargs[f"{which}_scale"] = self.scale_table(token, layout, unread, view,
                                                            padding)
        label = name or "-".join((self.path_name(), dtype_id(self.dtype), layout, scaled, form))
        return Case(label, kwargs, self.path.overrides)

    def path_name(self):
        return next((n for n, p in PATHS.items() if p is self.path), "custom")


class Case:
    def __init__(self, name, kwargs, overrides=None):
        self.name, self.kwargs, self.overrides = name, kwargs, overrides or {}


def scaled_set(scaled):
    return {"k": {"k"}, "v": {"v"}, "both": {"k", "v"}, "none": set()}[scaled]


def _prefix(lengths, device):
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device=device)


def _with_garbage(q2k):
    """Index rows by r % 5: 1: the last entry past every block; 2: entry 1 repeats entry 0;
    3: a -1 in the middle (the entries after it, real ids, must be ignored)."""
    q2k = q2k.clone()
    heads, rows, topk = q2k.shape
    if topk < 4:
        return q2k
    r = torch.arange(rows, device=q2k.device)
    q2k[:, r % 5 == 1, topk - 1] = 2 ** 31 - 1
    q2k[:, r % 5 == 2, 1] = q2k[:, r % 5 == 2, 0]
    q2k[:, r % 5 == 3, topk // 2] = -1
    return q2k


def key_locations(page_table, seqused_k):
    """(page, token in page) of every key, request by request (flat key order), as the page
    table places it: key i of request b is token i % 128 of page page_table[b, i // 128]."""
    lengths = seqused_k.to(torch.int64)
    request = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device),
                                      lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    position = torch.arange(request.numel(), device=lengths.device) - starts[request]
    page = page_table.to(torch.int64)[request, position // BLOCK]
    return page, position % BLOCK


# ---------------------------------------------------------------------------------------------
# Calls and comparisons
# ---------------------------------------------------------------------------------------------

def synchronize(name, device):
    if device.type != "cuda":
        return
    try:
        torch.cuda.synchronize()
    except RuntimeError as error:
        raise AssertionError(f"[{name}] CUDA error after the call: {error}") from error


def run(case, out=None):
    """One call into a NaN-poisoned out= (lse and lse_t from an allocator poisoned with NaN
    blocks of their size), the path's launch overrides applied. Returns (out, lse, lse_t)."""
    kwargs = case.kwargs
    q = kwargs["q"]
    if out is None:
        out = torch.full(q.shape, math.nan, dtype=q.dtype, device=q.device)
    poison = [torch.full(q.shape[:2], math.nan, device=q.device) for _ in range(2)]
    del poison
    overrides = (flashmsa.testing.launch_overrides(**case.overrides)
                 if case.overrides and q.device.type == "cuda" else contextlib.nullcontext())
    with overrides:
        result = flashmsa.msa_sparse_attention(**kwargs, out=out, return_temperature_lse=True)
    synchronize(case.name, q.device)
    assert result[0] is out, f"[{case.name}] msa_sparse_attention did not return out="
    return result


def run_cpu_backend(case):
    """The CPU backend on the same arguments moved to the CPU (strides and storage kept)."""
    cpu = to_device(case.kwargs, torch.device("cpu"))
    return flashmsa.msa_sparse_attention(**cpu, return_temperature_lse=True)


def dequantized(kwargs, which):
    """K or V of a call as its keys' logical values without the global scale, flat
    (total_k, Hkv, D) float32: e4m3 * scale[h, slot], the slot of the key's place (contract
    section 6), read from the call's own tensors."""
    stored = kwargs[which]
    scale = kwargs.get(f"{which}_scale")
    if "page_table" in kwargs:
        page, token = key_locations(kwargs["page_table"], kwargs["seqused_k"])
        # (total_k, Hkv, D); fp8 gathered through its bytes
        values = stored.view(torch.uint8)[page, :, token].view(stored.dtype).float()
        slots = page * BLOCK + token
    else:
        values = stored.float()
        slots = torch.arange(stored.shape[0], device=stored.device)
    if scale is not None:
        values = values * scale[:, slots].t()[:, :, None]
    return values


def _float(x):
    return None if x is None else float(x)


def reference(kwargs, compute_dtype=torch.float64):
    """torch_reference.reference_msa on the call's dequantised keys and values laid out flat
    (the global scales and everything else as given)."""
    if "page_table" in kwargs:
        cu_k = torch.nn.functional.pad(torch.cumsum(kwargs["seqused_k"].to(torch.int64), 0),
                                       (1, 0)).to(torch.int32)
    else:
        cu_k = kwargs["cu_seqlens_k"]
    return reference_msa(
        kwargs["q"], dequantized(kwargs, "k"), dequantized(kwargs, "v"), kwargs["q2k_indices"],
        kwargs["cu_seqlens_q"], cu_k, causal=kwargs["causal"],
        softmax_scale=kwargs.get("softmax_scale"),
        k_global_scale=_float(kwargs.get("k_global_scale")),
        v_global_scale=_float(kwargs.get("v_global_scale")),
        q_offset=kwargs.get("q_offset"),
        lse_temperature_scale=kwargs.get("lse_temperature_scale", 1.0),
        compute_dtype=compute_dtype, rows_per_chunk=REFERENCE_ROWS_PER_CHUNK)


def check(case, got, cpu_backend=True):
    """got (out, lse, lse_t) against the fp64 reference on the dequantised K/V (with section 7's
    bound against the plain evaluation in q's dtype) and, when asked, the CPU backend; rows that
    read nothing exactly 0."""
    out, lse, lse_t = got
    name, kwargs = case.name, case.kwargs
    dtype = kwargs["q"].dtype
    finite = torch.isfinite(out.float())
    assert bool(finite.all()), (f"[{name}] out has {int((~finite).sum())} NaN/inf elements "
                                f"(unwritten, or a NaN scale read) of {out.numel()}")
    ref, ref_lse, ref_lse_t = reference(kwargs)
    plain, _, _ = reference(kwargs, compute_dtype=dtype)
    check_close(out, ref, dtype, lse=lse, ref_lse=ref_lse, lse_t=lse_t, ref_lse_t=ref_lse_t,
                baseline=plain, case=f"{name} vs fp64 reference")
    empty = torch.isneginf(ref_lse)
    if bool(empty.any()):
        zeros = out[empty]
        assert bool((zeros == 0).all()), (f"[{name}] {int((zeros != 0).sum())} output values of "
                                          f"rows that read nothing are not exactly 0")
    if cpu_backend:
        cpu_out, cpu_lse, cpu_lse_t = run_cpu_backend(case)
        check_close(out.cpu(), cpu_out, dtype, lse=lse.cpu(), ref_lse=cpu_lse,
                    lse_t=lse_t.cpu(), ref_lse_t=cpu_lse_t, case=f"{name} vs CPU backend")


def _bits(x):
    if x.dtype in (FP8, torch.uint8):
        return x.view(torch.uint8)
    if x.is_floating_point():
        return x.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()])
    return x


def snapshot(kwargs):
    return {key: _bits(value).clone() for key, value in kwargs.items()
            if isinstance(value, torch.Tensor)}


def check_unchanged(case, before):
    """The call wrote nothing into its inputs (bits compared: NaN slots included)."""
    for key, value in before.items():
        assert torch.equal(_bits(case.kwargs[key]), value), (
            f"[{case.name}] input {key} changed during the call")


def assert_same(name, what, got, want):
    for part, g, w in zip(("out", "lse", "lse_t"), got, want):
        assert_bitwise(name, f"{part}: {what}", g, w)


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------

VARIANTS = [(scaled, form) for scaled in SCALED for form in FORMS]


@pytest.mark.parametrize("dtype", [BF16, FP16], ids=dtype_id)
@pytest.mark.parametrize("path", PATH_NAMES)
def test_matches_cpu_backend_and_reference(path, dtype, device=DEVICE):
    """Scales on K, V, both; float and device-resident global scales; flat and paged bitwise
    equal, the layout compared with the CPU backend and the reference alternating so that each
    q dtype meets every (scaled, form) pair and both layouts."""
    data = Data(PATHS[path], dtype, device)
    for i, (scaled, form) in enumerate(VARIANTS):
        flat, paged = (data.case(layout, scaled, form) for layout in ("flat", "paged"))
        before = [snapshot(c.kwargs) for c in (flat, paged)]
        got_flat, got_paged = run(flat), run(paged)
        for c, bits in zip((flat, paged), before):
            check_unchanged(c, bits)            # an out-of-bounds write often lands there
        assert_same(paged.name, "paged vs flat", got_paged, got_flat)
        checked_paged = (i + i // 2 + (dtype == FP16)) % 2 == 1
        if checked_paged:
            check(paged, got_paged)
        else:
            check(flat, got_flat)


@pytest.mark.parametrize("path", PATH_NAMES)
def test_unit_scales_give_the_unscaled_bits(path, device=DEVICE):
    """k_scale, v_scale or both all ones (K/V stored without per-token scales) give the bits of
    the call without them, flat and paged."""
    dtype = BF16 if PATH_NAMES.index(path) % 2 == 0 else FP16
    data = Data(PATHS[path], dtype, device, seed_offset=1)
    for layout in ("flat", "paged"):
        plain = data.case(layout, "none")
        want = run(plain)
        check(plain, want, cpu_backend=False)
        slots = (data.num_pages * BLOCK if layout == "paged" else data.total_k) + EXTRA_SLOTS
        ones = torch.ones(data.num_kv_heads, slots, device=data.device)
        for given in ("k", "v", "both"):
            extra = {f"{which}_scale": ones.clone() for which in scaled_set(given)}
            case = Case(f"{plain.name}-ones-{given}", dict(plain.kwargs, **extra),
                        plain.overrides)
            assert_same(case.name, f"all-ones {given} scales vs none", run(case), want)


@pytest.mark.parametrize("path", PATH_NAMES)
def test_graph_replay_reads_scales_in_place(path):
    """Capture one call with per-token scales (and device-resident global scales) in a CUDA
    graph: the replay equals the eager call bitwise; new scale values written into the captured
    tensors (every key's slot times 2 ** U(-2, 2)) give, on replay, the eager result for them."""
    index = PATH_NAMES.index(path)
    layout = ("paged", "flat")[index % 2]
    dtype = (BF16, FP16)[(index // 2) % 2]
    data = Data(PATHS[path], dtype, DEVICE, seed_offset=2)
    case = data.case(layout, "both", "device")
    name = f"{case.name}-graph"
    out = torch.full_like(case.kwargs["q"], math.nan)

    def call():
        overrides = (flashmsa.testing.launch_overrides(**case.overrides) if case.overrides
                     else contextlib.nullcontext())
        with overrides:
            return flashmsa.msa_sparse_attention(**case.kwargs, out=out,
                                                 return_temperature_lse=True)

    graph, captured = capture_graph(name, call)
    assert captured[0] is out, f"[{name}] the captured call did not return out="
    replay(name, graph, captured)
    first = tuple(x.clone() for x in captured)
    assert_same(name, "replay vs eager", first, run(case))
    check(case, first, cpu_backend=False)

    slots = data.key_slot if layout == "paged" else torch.arange(data.total_k,
                                                                 device=DEVICE)
    for which in ("k", "v"):
        table = case.kwargs[f"{which}_scale"]
        factor = torch.exp2(data.rand(data.num_kv_heads, slots.numel()) * 4 - 2)
        table[:, slots] = table[:, slots] * factor       # in place: the captured tensor
    replay(name, graph, captured)
    replayed = tuple(x.clone() for x in captured)
    assert not torch.equal(replayed[1], first[1]), (
        f"[{name}] new scales left lse unchanged: the replay did not read them")
    assert_same(name, "replay after new scales vs eager on them", replayed, run(case))
    check(Case(f"{name}-new-scales", case.kwargs), replayed, cpu_backend=False)


@pytest.mark.parametrize("layout", ["flat", "paged"])
@pytest.mark.parametrize("path", PATH_NAMES)
def test_unread_slots_are_never_read(path, layout, device=DEVICE):
    """The slots of no key (flat: at or past total_k; paged: past each request's seqused_k in
    its last page, the spare pages, past num_pages * 128) hold NaN or finite scales: the same
    bits (the kernels never read them, nor multiply a masked column by them)."""
    dtype = BF16 if PATH_NAMES.index(path) % 2 == 0 else FP16
    data = Data(PATHS[path], dtype, device, seed_offset=3)
    poisoned = data.case(layout, "both", "float", unread="nan")
    finite = data.case(layout, "both", "float", unread="finite")
    for which in ("k_scale", "v_scale"):
        nan_slots = int(torch.isnan(poisoned.kwargs[which]).sum())
        assert nan_slots >= data.num_kv_heads * EXTRA_SLOTS, (
            f"[{poisoned.name}] {which} has only {nan_slots} unread (NaN) slots")
        assert bool(torch.isfinite(finite.kwargs[which]).all())
        if layout == "paged":
            tails = sum((-n) % BLOCK for n in data.k_lens)
            assert nan_slots == data.num_kv_heads * (
                tails + SPARE_PAGES * BLOCK + EXTRA_SLOTS), f"[{poisoned.name}] NaN slots"
    want = run(finite)
    before = snapshot(poisoned.kwargs)
    got = run(poisoned)
    check_unchanged(poisoned, before)
    assert_same(poisoned.name, "NaN vs finite scales in unread slots", got, want)
    check(poisoned, got, cpu_backend=False)


@pytest.mark.parametrize("path", PATH_NAMES)
def test_strided_scale_rows(path, device=DEVICE):
    """k_scale / v_scale as (Hkv, num_slots) views of wider NaN-filled tensors (storage offset
    3, row strides num_slots + 8 and num_slots + 47): the bits of contiguous
    tensors holding the same values, and right."""
    index = PATH_NAMES.index(path)
    layout = ("flat", "paged")[index % 2]
    dtype = (FP16, BF16)[(index // 2) % 2]
    data = Data(PATHS[path], dtype, device, seed_offset=4)
    contiguous = data.case(layout, "both", "device")
    wide = data.case(layout, "both", "device", view="wide")
    for which in ("k_scale", "v_scale"):
        scale = wide.kwargs[which]
        assert scale.stride(0) > scale.shape[1] and scale.storage_offset() > 0, (
            f"[{wide.name}] {which} should be a strided view, strides {scale.stride()}")
        assert torch.equal(_bits(scale), _bits(contiguous.kwargs[which]))
    want = run(contiguous)
    # The whole wide tensors, NaN padding included, must come back unchanged.
    bases = {which: wide.kwargs[which]._base for which in ("k_scale", "v_scale")}
    before = {which: _bits(base).clone() for which, base in bases.items()}
    got = run(wide)
    for which, base in bases.items():
        assert torch.equal(_bits(base), before[which]), f"[{wide.name}] {which}'s tensor changed"
    assert_same(wide.name, "strided vs contiguous scale rows", got, want)
    check(wide, got)


CONSUMERS = re.compile(r"prefill_kernel<[^<>(]*?,\s*(?:true|false|\(bool\)\d),\s*(\d+)\s*[,>]")


@pytest.mark.parametrize("path", PATH_NAMES)
def test_path_takes_its_kernel(path):
    """The call with per-token scales launches the kernel its path is named for: the one-token
    decode kernel or the prefill kernel, with its number of consumer warpgroups where the
    profiler's kernel name shows the template arguments, and the merge kernel exactly when the
    splits merge through the workspace."""
    from torch.profiler import ProfilerActivity, profile
    spec = PATHS[path]
    data = Data(spec, BF16, DEVICE, seed_offset=5)
    case = data.case("paged", "both", "float")
    run(case)                                   # initialisation outside the profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        got = run(case)
    names = sorted({event.key for event in prof.key_averages()
                    if event.device_type.name == "CUDA"})
    assert any(spec.kernel in n for n in names), (
        f"[{case.name}] expected {spec.kernel}, launched {names}")
    other = "prefill_kernel" if spec.kernel == "decode_kernel" else "decode_kernel"
    assert not any(other in n for n in names), f"[{case.name}] launched {names}"
    merged = any("merge_splits" in n for n in names)
    assert merged == spec.merge, (
        f"[{case.name}] merge kernel {'not ' if spec.merge else ''}expected, launched {names}")
    if spec.consumers is not None:
        counts = {int(m.group(1)) for n in names for m in [CONSUMERS.search(n)] if m}
        # Kernel names without template arguments cannot say; the plan's rules
        # (tests/cpp/test_launch_plan.cpp) then stand for it.
        assert not counts or counts == {spec.consumers}, (
            f"[{case.name}] expected {spec.consumers} consumer warpgroups, launched {names}")
    check(case, got, cpu_backend=False)
