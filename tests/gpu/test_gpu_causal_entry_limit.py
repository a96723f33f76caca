"""The causal entry limit (msa_sparse_attention(..., causal_entry_limit=True)) on the Hopper
kernels, through every way they plan a tile's union of blocks:

- decode, one query token a request (MiniMax-M3 heads Hq 64 / Hkv 4): topk 16 takes the decode
  kernel (plan_decode_token: one row per CTA, splits of the union in a cluster at small
  batches), topk 64 the prefill kernel's one-consumer shape with tiles of 4 x 64 = 256
  candidates (the block-wide plan_union);
- multi-token prediction, 2-8 query tokens a request: the decode kernel (rows x KV heads fit
  the SMs), the one-consumer shape planned in one warp in entry order with the speculative
  first block (32 requests of 4 tokens, bf16 K/V), the two-consumer kernel planned in one warp
  through the union bitmap with the speculative lowest block (32 requests of 8 tokens), and
  topk 64 block-wide;
- prefill chunks of 200 to 2000 query tokens after cached prefixes (q_offset tensor): group 16
  (tiles of 8 tokens x 16 = 128 candidates, warp planning) and group 4 at topk 64 (tiles of 32
  tokens x 64 = 2048 candidates, the block-wide plan);
- the sorting network, the block-wide plan and no speculation forced by the launch overrides,
  which must change no bit;
- a CUDA graph captured with the limit, replayed after q2k_indices and seqused_k change in
  place.

bf16 q with bf16 and fp8 (float8_e4m3fn, msa_inputs' global descales) K/V, paged and flat. Each
result comes from a NaN-poisoned out= and must (gpu_harness):
- equal bitwise the GPU result without the limit on the masked copy of q2k_indices (entries c
  with c * 128 > the row's causal position set to -1; tests/python/test_causal_entry_limit.py);
- agree with the CPU backend called with the same arguments, causal_entry_limit=True included,
  within contract section 7, and with the fp64 reference on the masked copy (with the bound
  against a plain evaluation in q's dtype; rows that read nothing exactly 0);
- differ from the result without the limit on rows where the limit changes the selection (the
  index rows of test_causal_entry_limit.entry_limited_indices hold visible, distinct blocks past
  the limit).
"""
import math

import pytest
import torch

import flashmsa
import flashmsa.testing
import test_causal_entry_limit as rule
from gpu_harness import (DEVICE, Case, assert_bitwise, capture_graph, check_gpu_result,
                         check_inputs_unchanged, replay, run_gpu, synchronize)
from torch_reference import check_close

BF16 = torch.bfloat16
M3 = (64, 4)   # MiniMax-M3: Hq 64, Hkv 4
TP4 = (16, 1)  # M3 at tensor parallelism 4
G4 = (8, 2)    # group 4: 16 tokens a warpgroup's 64 rows

# KV lengths of decode and multi-token requests, by topk: one block and its edges, the limit's
# edges (topk 16: positions 1920-2047 read all 16 entries; topk 64: 8064-8191 all 64), and
# lengths past them. Kept short: paging a long cache on the host is most of a case's time.
LENGTH_POOLS = {
    16: [1, 60, 128, 129, 300, 640, 1000, 1500, 1919, 1921, 2048, 2049, 2300, 3000],
    64: [1, 129, 1000, 2049, 4000, 6000, 8063, 8065, 8193, 9000],
}


def pool_lengths(batch, topk, seed):
    """batch lengths drawn from topk's pool, every one of them while batch allows."""
    pool = LENGTH_POOLS[topk]
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(pool), generator=generator).tolist()
    extra = torch.randint(0, len(pool), (max(0, batch - len(order)),),
                          generator=generator).tolist()
    return [pool[i] for i in (order + extra)[:batch]]


def limited_case(name, seqlens_q, seqlens_k, heads, topk, *, kv=None, layout="paged",
                 q_offset=None, seed=0):
    """bf16 q, K/V bf16 (kv None) or fp8, causal, with the index rows of
    rule.entry_limited_indices, moved to the GPU."""
    kwargs = rule.make_kwargs(seqlens_q, seqlens_k, *heads, topk, q_offset=q_offset,
                              layout=layout, dtype=BF16, kv_dtype=kv, seed=seed)
    case = Case(name, kwargs)
    if kv == "fp8":
        assert case.gpu["k"].dtype == torch.float8_e4m3fn, f"[{name}] K/V must be fp8"
    return case


def variant(case, name, **cpu_changes):
    """The case with some inputs replaced (given on the CPU, copied to the GPU), the other
    tensors shared rather than copied again."""
    other = Case.__new__(Case)
    other.name = name
    other.cpu = dict(case.cpu, **cpu_changes)
    other.gpu = dict(case.gpu, **{key: value.to(DEVICE) for key, value in cpu_changes.items()})
    return other


def assert_same(name, what, got, want):
    for part, g, w in zip(("out", "lse", "lse_t"), got, want):
        assert_bitwise(name, f"{part}: {what}", g, w)


def masked_variant(case):
    positions = rule.causal_positions(case.cpu)
    masked = rule.masked_indices(case.cpu["q2k_indices"], positions)
    return variant(case, f"{case.name} (masked q2k_indices)", q2k_indices=masked), positions


def check(case, expect_cut=True):
    """Every comparison of the module docstring for one case; returns the limited result."""
    name = case.name
    masked, positions = masked_variant(case)
    got = run_gpu(case, causal_entry_limit=True)
    check_inputs_unchanged(case)
    on_masked = run_gpu(masked, causal_entry_limit=False)
    assert_same(name, "causal_entry_limit=True vs False on the masked q2k_indices", got,
                on_masked)

    cpu_out, cpu_lse, cpu_lse_t = flashmsa.msa_sparse_attention(
        **case.cpu, causal_entry_limit=True, return_temperature_lse=True)
    check_close(got[0].cpu(), cpu_out, case.q_dtype, lse=got[1].cpu(), ref_lse=cpu_lse,
                lse_t=got[2].cpu(), ref_lse_t=cpu_lse_t,
                case=f"{name} vs CPU backend, causal_entry_limit=True")
    # The fp64 reference (and the plain bf16 evaluation's bound) on the masked copy.
    check_gpu_result(masked, got, cpu_backend=False)

    negative = (positions < 0).to(DEVICE)
    if bool(negative.any()):
        assert bool((got[0][negative] == 0).all()), (
            f"[{name}] rows at negative positions must have out exactly 0")
        assert bool(torch.isneginf(got[1][negative]).all()), (
            f"[{name}] rows at negative positions must have lse -inf")

    if expect_cut:
        unlimited = run_gpu(case, causal_entry_limit=False)
        selection = rule.expected_differences(case.cpu["q2k_indices"], positions,
                                              rule.row_key_lengths(case.cpu))
        differ = rule.rows_differ(got[:2], unlimited[:2]).cpu()
        assert bool(selection.any()), (
            f"[{name}] the case's index rows never let the limit change a selection")
        assert bool(differ[selection].all()), (
            f"[{name}] {int((~differ[selection]).sum())} of {int(selection.sum())} rows whose "
            f"selection the limit changes gave the unlimited call's result")
    return got


# ---------------------------------------------------------------------------------------------
# Decode: one query token a request
# ---------------------------------------------------------------------------------------------

# (batch, topk, kv, layout)
DECODE_CASES = [
    (64, 16, None, "paged"),   # decode kernel, one split
    (4, 16, None, "flat"),     # decode kernel, the union split over a cluster
    (32, 64, None, "paged"),   # one-consumer prefill kernel, tiles of 256 candidates
    (64, 16, "fp8", "paged"),
    (16, 64, "fp8", "flat"),
]


@pytest.mark.parametrize("batch,topk,kv,layout", DECODE_CASES, ids=[
    f"b{b}-topk{t}-{kv or 'bf16'}-{layout}" for b, t, kv, layout in DECODE_CASES])
def test_decode(batch, topk, kv, layout):
    seed = 1000 + batch + topk + (kv == "fp8")
    lengths = pool_lengths(batch, topk, seed)
    name = f"decode-b{batch}-m3-topk{topk}-{kv or 'bf16'}-{layout}"
    check(limited_case(name, [1] * batch, lengths, M3, topk, kv=kv, layout=layout, seed=seed))


# ---------------------------------------------------------------------------------------------
# Multi-token prediction: 2-8 query tokens a request
# ---------------------------------------------------------------------------------------------

# (batch, tokens, heads, topk, kv, layout)
MTP_CASES = [
    (4, 8, M3, 16, None, "paged"),    # decode kernel: 32 rows x 4 KV heads on 132 SMs
    (32, 4, M3, 16, None, "paged"),   # one-consumer, warp plan in entry order, speculation
    (32, 8, M3, 16, None, "flat"),    # two-consumer, warp plan through the bitmap
    (8, 2, M3, 16, "fp8", "paged"),   # decode kernel
    (16, 8, TP4, 64, "fp8", "paged"),  # two-consumer, tiles of 8 x 64: block-wide
]


@pytest.mark.parametrize("batch,tokens,heads,topk,kv,layout", MTP_CASES, ids=[
    f"b{b}-q{q}-hq{h[0]}-topk{t}-{kv or 'bf16'}-{layout}" for b, q, h, t, kv, layout in MTP_CASES])
def test_multi_token_prediction(batch, tokens, heads, topk, kv, layout):
    seed = 2000 + batch * tokens + topk + (kv == "fp8")
    lengths = pool_lengths(batch, topk, seed)
    name = f"mtp-b{batch}-q{tokens}-hq{heads[0]}-topk{topk}-{kv or 'bf16'}-{layout}"
    check(limited_case(name, [tokens] * batch, lengths, heads, topk, kv=kv, layout=layout,
                       seed=seed))


# ---------------------------------------------------------------------------------------------
# Prefill chunks after cached prefixes (q_offset tensor)
# ---------------------------------------------------------------------------------------------

# (id, chunk lengths, cached prefixes, heads, topk, kv, layout). A chunk at prefix P reads keys
# up to P + its length; the first chunk of a prompt (P = 0) is cut by the limit throughout, a
# chunk past 128 x topk not at all.
PREFILL_CASES = [
    ("g16-topk16-bf16-flat", [2000, 300, 600], [0, 1200, 5000], TP4, 16, None, "flat"),
    ("g16-topk16-fp8-paged", [900, 400], [300, 3000], TP4, 16, "fp8", "paged"),
    ("g4-topk64-bf16-paged", [1500, 400], [0, 7000], G4, 64, None, "paged"),
    ("g4-topk64-fp8-flat", [700, 200], [2000, 8500], G4, 64, "fp8", "flat"),
]


def prefill_case(spec, seed):
    tag, chunks, prefixes, heads, topk, kv, layout = spec
    lengths = [prefix + chunk for prefix, chunk in zip(prefixes, chunks)]
    return limited_case(f"prefill-{tag}", chunks, lengths, heads, topk, kv=kv, layout=layout,
                        q_offset=list(prefixes), seed=seed)


@pytest.mark.parametrize("spec", PREFILL_CASES, ids=[spec[0] for spec in PREFILL_CASES])
def test_prefill_chunks_after_cached_prefixes(spec):
    check(prefill_case(spec, seed=3000 + sum(spec[1])))


# ---------------------------------------------------------------------------------------------
# Planning variants forced by the launch overrides: no bit changes
# ---------------------------------------------------------------------------------------------

VARIANT_CASES = {
    "mtp-b32-q8-bitmap": lambda: limited_case("variants-mtp-b32-q8-m3-topk16-bf16-paged",
                                              [8] * 32, pool_lengths(32, 16, 4001), M3, 16,
                                              seed=4001),
    "mtp-b32-q4-entry-order": lambda: limited_case("variants-mtp-b32-q4-m3-topk16-bf16-paged",
                                                   [4] * 32, pool_lengths(32, 16, 4002), M3, 16,
                                                   seed=4002),
    "prefill-g16": lambda: prefill_case(("variants-g16-topk16-bf16-paged", [700, 300],
                                         [0, 1400], TP4, 16, None, "paged"), seed=4003),
}
OVERRIDES = {"no-speculation": dict(speculate=0), "sorting-network": dict(warp_plan=2),
             "block-wide": dict(warp_plan=0)}


@pytest.mark.parametrize("variant_name", sorted(VARIANT_CASES))
def test_planning_variants_change_no_bit(variant_name):
    """The same limited call planned without the speculative first block, through the warp's
    sorting network, and block-wide (each override alone; the warp-plan ones apply to the
    two-consumer kernel) gives the default plan's result bitwise, and equals the masked call
    under the same override."""
    case = VARIANT_CASES[variant_name]()
    default = check(case)
    masked, _ = masked_variant(case)
    for what, fields in OVERRIDES.items():
        with flashmsa.testing.launch_overrides(**fields):
            got = run_gpu(case, causal_entry_limit=True)
            on_masked = run_gpu(masked, causal_entry_limit=False)
        assert_same(case.name, f"{what} override vs the default plan", got, default)
        assert_same(case.name, f"{what} override: limited vs the masked q2k_indices", got,
                    on_masked)


# ---------------------------------------------------------------------------------------------
# CUDA graphs
# ---------------------------------------------------------------------------------------------

def test_graph_replay_after_indices_and_lengths_change_in_place():
    """A decode step (16 requests, M3 heads, topk 16, paged bf16) captured with
    causal_entry_limit=True replays to the eager result bitwise; after seqused_k (shorter
    lengths, within the pages the table holds) and q2k_indices (rows for the new positions) are
    rewritten in place, the replay equals an eager call on the new inputs bitwise and passes
    every check of check()."""
    batch, topk = 16, 16
    lengths_a = pool_lengths(batch, topk, 5001)
    case = limited_case("graph-decode-b16-m3-topk16-bf16-paged", [1] * batch, lengths_a, M3,
                        topk, seed=5001)
    name = case.name
    eager_a = run_gpu(case, causal_entry_limit=True)
    out = torch.full_like(case.gpu["q"], math.nan)

    def call():
        return flashmsa.msa_sparse_attention(**case.gpu, out=out, return_temperature_lse=True,
                                             causal_entry_limit=True)

    graph, captured = capture_graph(name, call)
    replay(name, graph, captured)
    assert_same(name, "replay vs eager", captured, eager_a)

    # Step B: each request shorter (at least one key), positions moving across 128 x topk.
    generator = torch.Generator().manual_seed(5002)
    shrink = torch.rand(batch, generator=generator)
    lengths_b = [max(1, int(length * float(s))) for length, s in zip(lengths_a, shrink)]
    lengths_b[0] = min(lengths_a[0], 700)
    seqused_b = torch.tensor(lengths_b, dtype=torch.int32)
    positions_b = torch.tensor(lengths_b, dtype=torch.int64) - 1
    q2k_b = rule.entry_limited_indices(positions_b, torch.tensor(lengths_b), M3[1], topk,
                                       generator)
    case.gpu["seqused_k"].copy_(seqused_b)
    case.gpu["q2k_indices"].copy_(q2k_b)
    case.cpu["seqused_k"], case.cpu["q2k_indices"] = seqused_b, q2k_b
    replay(name, graph, captured)
    replayed = tuple(x.clone() for x in captured)
    case.name = f"{name} after the in-place change"
    assert_same(case.name, "replay vs eager on the new inputs", replayed,
                run_gpu(case, causal_entry_limit=True))
    changed = rule.rows_differ(replayed[:2], eager_a[:2])
    assert bool(changed.any()), f"[{case.name}] the replay gave step A's result on every row"
    got = check(case)
    assert_same(case.name, "replay vs check()'s eager call", replayed, got)
    synchronize(case.name)
