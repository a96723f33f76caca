"""vLLM entry points against the direct call: flashmsa.integrations.vllm's
minimax_m3_sparse_attn (prefill) and minimax_m3_sparse_attn_decode (decode, multi-token
prediction) timed beside flashmsa.msa_sparse_attention on the same inputs, in the same run, as
CUDA-graph replays over rotating input sets, medians. The target: every entry point within 2% of
the direct call.

Rows (MiniMax-M3 heads: Hq 64, Hkv 4, D 128, topk 16, q bf16, `random` selection from
flashmsa.patterns.make_q2k), each with a bf16 and an fp8 cache: decode at batch 1 / 16 / 64 / 128
on KV 32768, multi-token prediction (decode_query_len 8) at batch 32 on KV 32768, one prefill
request of 8192 query tokens on 32768 keys (a 24576-token prefix), and a chunked-prefill batch
of four requests on prefixes of different lengths.

Both calls read vLLM's paged packed cache (num_blocks, Hkv, 128, 2 * D) with a block table: the
entry point is given the cache, the direct call its two halves, the views the entry point makes.
fp8 caches are float8_e4m3fn with one-element float32 k_scale / v_scale tensors (K and V halves
each scaled from the same bf16 data), which the direct call gets as k_global_scale /
v_global_scale. "fp8/token" rows read the same fp8 cache with per-(KV head, token slot) scales
instead, (Hkv, num_blocks * 128) float32 tensors (every slot holding the per-tensor scale, so
the reference check is the fp8 row's), which both calls pass as k_scale / v_scale: the ratio of
their direct time to the fp8 row's is the cost of per-token scales (target at most 1.05). The
direct call passes causal_entry_limit=True, as the entry point does, so both run the kernel on
the same arguments: the time between them is the entry point's own per-call device work, and
their outputs must be bitwise equal. That is checked on every row,
once, outside the timing, and the direct output is checked against flashmsa.reference on sampled
rows. The exit status is 1 when a row's outputs differ, a check fails or a row errors; a ratio
above the target is reported, not an error.

The two calls are timed in alternating rounds (direct first, then entry first, ...), each round a
fresh graph capture of the set's calls; a call's time is the median over all its rounds' samples,
so a drift of the GPU's clocks during the run weighs on both alike. The spread columns give the
range of the per-round medians against the median: a ratio within that spread of 1.02 is not a
clear pass or fail.

--kv-dtype restricts the run to one cache dtype (auto: bf16, fp8); without it each row runs both.
--device cpu runs tiny shapes through the CPU backend: it checks the code paths and the bitwise
equality; its wall-clock timings mean nothing and are not judged.

    python3 -m bench.vllm_entry --out out/bench [--quick] [--device cpu] [--rows NAME,...]
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch

from . import common, decode
from .common import HEAD_DIM, Timing, time_calls
from .selection import BLOCK

Q_DTYPE = torch.bfloat16
SM_SCALE = HEAD_DIM ** -0.5     # MiniMax-M3's, as vLLM passes it
TARGET_RATIO = 1.02             # entry point time / direct call time
TOKEN_SCALE_TARGET = 1.05       # fp8 with per-token scales / fp8 with per-tensor ones
GPU_HEADS = (64, 4, 16)         # Hq, Hkv, topk
CPU_HEADS = (8, 2, 4)


@dataclass
class Case:
    name: str
    kind: str           # "decode" (decode and multi-token prediction) or "prefill"
    q_lens: list        # query tokens per request
    kv_lens: list       # seq_lens: each request's keys, this step's tokens included
    quick: bool = True  # kept by --quick

    @property
    def prefix_lens(self):
        return [k - q for q, k in zip(self.q_lens, self.kv_lens)]


def decode_case(name, batch, kv, qlen, quick=True):
    return Case(name, "decode", [qlen] * batch, [kv] * batch, quick)


def prefill_case(name, chunks, quick=True):
    """chunks: (query tokens, prefix tokens) per request."""
    return Case(name, "prefill", [q for q, _ in chunks], [q + p for q, p in chunks], quick)


def build_cases(device: str) -> list:
    if device == "cpu":
        # Tiny shapes with the GPU rows' structure: a single request, a batch with short and
        # unaligned lengths, multi-token prediction, a prefill on a prefix and a ragged
        # chunked-prefill batch (one request without a prefix, one with an unaligned one).
        return [decode_case("decode_b1_kv1000", 1, 1000, 1),
                Case("decode_b3_kv1000", "decode", [1, 1, 1], [1000, 77, 555]),
                Case("mtp8_b2_kv1000", "decode", [8, 8], [1000, 300]),
                prefill_case("prefill_q256_kv1024", [(256, 768)]),
                prefill_case("chunked_prefill_3req_q290", [(96, 0), (64, 300), (130, 517)])]
    # --quick keeps the smallest and largest decode batches (where the entry point's fixed
    # per-call work weighs most and least), MTP and both prefill rows.
    return [decode_case("decode_b1_kv32768", 1, 32768, 1),
            decode_case("decode_b16_kv32768", 16, 32768, 1, quick=False),
            decode_case("decode_b64_kv32768", 64, 32768, 1, quick=False),
            decode_case("decode_b128_kv32768", 128, 32768, 1),
            decode_case("mtp8_b32_kv32768", 32, 32768, 8),
            prefill_case("prefill_q8192_kv32768", [(8192, 32768 - 8192)]),
            # Chunked prefill as vLLM batches it: a first chunk, chunks on cached prefixes (one
            # not a multiple of 128), and one reaching KV 32768; 8192 query tokens in all.
            prefill_case("chunked_prefill_4req_q8192",
                         [(2048, 0), (1024, 15360), (3072, 5000), (2048, 30720)])]


class PackedCache(decode.PagedCache):
    """vLLM's packed K|V cache (num_blocks, Hkv, 128, 2 * D), K in [..., :D] and V in [..., D:],
    shared by every row; each row maps its requests to disjoint random blocks (page_tables).

    bf16: randn / 3. fp8: the K and V halves of a bf16 cache each converted to float8_e4m3fn with
    its own per-tensor descale, held as a one-element float32 tensor on the device (k_scale,
    v_scale; None for bf16), as vLLM's layers hold theirs. msa_k / msa_v are the halves, the
    views the entry point passes on."""

    label = "bf16"
    per_token = False   # k_scale / v_scale: per-(KV head, token slot) tensors, not one-element

    def __init__(self, num_pages: int, num_kv_heads: int, device: str,
                 kv_dtype: torch.dtype = Q_DTYPE, source: PackedCache | None = None):
        shape = (num_pages, num_kv_heads, BLOCK, 2 * HEAD_DIM)
        self.num_pages = num_pages
        self.k_scale = self.v_scale = None
        self.label = common.dtype_name(kv_dtype)
        if kv_dtype == common.FP8:
            self.cache = torch.empty(shape, dtype=common.FP8, device=device)
            scales = []
            for half in (slice(None, HEAD_DIM), slice(HEAD_DIM, None)):
                part, scale = common.to_fp8(source.cache[..., half])
                self.cache[..., half] = part
                del part
                scales.append(torch.tensor([scale], dtype=torch.float32, device=device))
            self.k_scale, self.v_scale = scales
        else:
            self.cache = torch.empty(shape, dtype=kv_dtype, device=device).normal_(0, 1 / 3)
        self.k = self.msa_k = self.cache[..., :HEAD_DIM]
        self.v = self.msa_v = self.cache[..., HEAD_DIM:]
        self.kv_dtype = self.cache.dtype

    def bytes(self) -> int:
        return self.cache.numel() * self.cache.element_size()

    def with_token_scales(self) -> PackedCache:
        """This fp8 cache (shared, not copied) with per-token scales: every slot of K's and V's
        (Hkv, num_pages * 128) tables holds this cache's per-tensor scale."""
        other = object.__new__(PackedCache)
        other.__dict__.update(self.__dict__)
        other.label, other.per_token = "fp8/token", True
        slots = (self.cache.shape[1], self.num_pages * BLOCK)
        other.global_k_scale, other.global_v_scale = self.k_scale, self.v_scale
        other.k_scale = self.k_scale.expand(slots).contiguous()
        other.v_scale = self.v_scale.expand(slots).contiguous()
        return other

    def scale_arguments(self) -> dict:
        """The direct call's scale arguments."""
        if self.per_token:
            return dict(k_scale=self.k_scale, v_scale=self.v_scale)
        return dict(k_global_scale=self.k_scale, v_global_scale=self.v_scale)

    def reference_scale_arguments(self) -> dict:
        """Scales for flashmsa.reference, which takes per-tensor ones: the same values."""
        if self.per_token:
            return dict(k_global_scale=self.global_k_scale, v_global_scale=self.global_v_scale)
        return dict(k_global_scale=self.k_scale, v_global_scale=self.v_scale)


def call_bytes(case: Case, heads, kv_dtype: torch.dtype) -> int:
    """Bytes one call moves: per request and KV head at most min(q tokens * topk, the request's
    blocks) blocks of K and V in their storage, plus q and out in bf16."""
    hq, hkv, topk = heads
    blocks = sum(hkv * min(q * topk, math.ceil(k / BLOCK))
                 for q, k in zip(case.q_lens, case.kv_lens))
    return (blocks * decode.page_bytes_per_head(kv_dtype)
            + 2 * sum(case.q_lens) * hq * HEAD_DIM * torch.empty(0, dtype=Q_DTYPE).element_size())


def sets_for(case: Case, heads, kv_dtypes, device: str) -> int:
    """Rotation sets that keep every dtype's calls out of L2 (the sets are shared by the
    dtypes, so the narrowest storage decides)."""
    return max(common.rotation_sets(call_bytes(case, heads, d), device) for d in kv_dtypes)


def pages_needed(case: Case, n_sets: int) -> int:
    return n_sets * sum(math.ceil(k / BLOCK) for k in case.kv_lens)


# ---------------------------------------------------------------------------------------------
# The two calls of a row


@dataclass
class Meta:
    """A row's per-request metadata on the device, shared by its sets and both calls."""
    cu_q: torch.Tensor
    seq_lens: torch.Tensor
    prefix_lens: torch.Tensor


def direct_call(flashmsa, case: Case, cache: PackedCache, s: dict, meta: Meta, heads, out):
    """flashmsa.msa_sparse_attention with the arguments the entry point maps vLLM's to."""
    return flashmsa.msa_sparse_attention(
        s["q"], cache.msa_k, cache.msa_v, s["q2k"], meta.cu_q, None, causal=True,
        softmax_scale=SM_SCALE, page_table=s["table"], seqused_k=meta.seq_lens,
        q_offset=meta.prefix_lens if case.kind == "prefill" else None, out=out,
        causal_entry_limit=True, **cache.scale_arguments())


def entry_call(ops, case: Case, cache: PackedCache, s: dict, meta: Meta, heads, out):
    """The vLLM op with vLLM's arguments, positionally as vLLM's model code calls it."""
    hkv = heads[1]
    if case.kind == "decode":
        return ops.minimax_m3_sparse_attn_decode(
            s["q"], cache.cache, s["q2k"], s["table"], meta.seq_lens, hkv, SM_SCALE, out,
            case.q_lens[0], cache.k_scale, cache.v_scale)
    return ops.minimax_m3_sparse_attn(
        s["q"], cache.cache, s["q2k"], s["table"], meta.cu_q, meta.seq_lens, meta.prefix_lens,
        max(case.q_lens), hkv, SM_SCALE, out, cache.k_scale, cache.v_scale)


def bit_mismatches(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements whose bits differ: torch.equal would call -0 and +0 equal, and NaN unequal to
    itself."""
    return int((a.view(torch.int16) != b.view(torch.int16)).sum())


def time_pair(fns: dict, args, rounds: int) -> dict:
    """{name: (Timing over all rounds' samples, [per-round medians])} for the callables lists in
    fns, timed in alternating rounds (the order reversed every round)."""
    names = list(fns)
    samples = {n: [] for n in names}
    medians = {n: [] for n in names}
    methods = {n: set() for n in names}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            t = time_calls(fns[n], args.device, args.reps, args.warmup, graph=True)
            samples[n] += t.samples
            medians[n].append(t.seconds)
            methods[n].add(t.method)
    return {n: (Timing(statistics.median(samples[n]), len(samples[n]),
                       "+".join(sorted(methods[n])), samples[n]), medians[n]) for n in names}


def spread_pct(medians: list, center: float) -> float:
    return 100 * (max(medians) - min(medians)) / center


def make_sets(flashmsa, case: Case, cache: PackedCache, heads, n_sets: int, device: str, seed: int):
    hq, hkv, topk = heads
    sets = []
    for i, table in enumerate(cache.page_tables(case.kv_lens, n_sets, device)):
        q2k = flashmsa.patterns.make_q2k("random", case.q_lens, case.kv_lens, hkv, topk,
                                         causal=True, seed=seed + i, device=device)
        q = common.randn((sum(case.q_lens), hq, HEAD_DIM), Q_DTYPE, device)
        sets.append(dict(q=q, q2k=q2k, table=table, out=torch.full_like(q, float("nan"))))
    return sets


def run_row(flashmsa, ops, case, cache, sets, meta, heads, args, rounds):
    """One (case, cache dtype) row: the bitwise check and the reference check on set 0, outside
    the timing, then both calls timed."""
    s0 = sets[0]
    outs = {}
    for name, call in (("direct", direct_call), ("entry", entry_call)):
        outs[name] = torch.full_like(s0["q"], float("nan"))
        call(flashmsa if name == "direct" else ops, case, cache, s0, meta, heads, outs[name])
    mismatches = bit_mismatches(outs["direct"], outs["entry"])
    finite = bool(torch.isfinite(outs["direct"]).all())
    rel = common.sampled_error(flashmsa, outs["direct"], dict(
        q=s0["q"], k=cache.msa_k, v=cache.msa_v, q2k_indices=s0["q2k"], cu_seqlens_q=meta.cu_q,
        causal=True, softmax_scale=SM_SCALE, page_table=s0["table"], seqused_k=meta.seq_lens,
        q_offset=meta.prefix_lens if case.kind == "prefill" else None,
        **cache.reference_scale_arguments()))
    del outs

    fns = {"direct": [lambda s=s: direct_call(flashmsa, case, cache, s, meta, heads, s["out"])
                      for s in sets],
           "entry": [lambda s=s: entry_call(ops, case, cache, s, meta, heads, s["out"])
                     for s in sets]}
    timed = time_pair(fns, args, rounds)
    (direct, direct_medians), (entry, entry_medians) = timed["direct"], timed["entry"]
    ratio = entry.seconds / direct.seconds
    notes = [n for n in (common.check_note(rel),
                         "" if finite else "NON-FINITE OUTPUT",
                         "" if mismatches == 0 else f"OUTPUTS DIFFER in {mismatches} elements")
             if n]
    if args.device == "cuda" and {direct.method, entry.method} != {"graph"}:
        # A call timed eagerly carries its launch gaps: its ratio is not the graphs' ratio.
        notes.append(f"not all graph replays (direct {direct.method}, entry {entry.method})")
    return dict(
        direct_us=direct.seconds * 1e6, entry_us=entry.seconds * 1e6,
        overhead_us=(entry.seconds - direct.seconds) * 1e6, ratio=ratio,
        # CPU wall clock says nothing about the GPU target.
        within_2pct=(ratio <= TARGET_RATIO) if args.device == "cuda" else None,
        direct_spread_pct=spread_pct(direct_medians, direct.seconds),
        entry_spread_pct=spread_pct(entry_medians, entry.seconds),
        reps=direct.reps, rounds=rounds, method=direct.method,
        bitwise_equal=mismatches == 0, mismatches=mismatches, check_rel_l2=rel,
        note="; ".join(notes))


# ---------------------------------------------------------------------------------------------
# Driver


def parse_args(argv=None):
    p = common.base_parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=None,
                   help="alternating timing rounds per row (default 4, quick 2, cpu 2)")
    p.add_argument("--rows", default="", help="comma-separated row names to run (default: all "
                   "of the device's rows, --quick's subset)")
    # Unset --kv-dtype runs both caches on every row; given, it restricts the run to one.
    p.set_defaults(kv_dtype=None)
    return p.parse_args(argv)


def select_cases(args) -> list:
    cases = build_cases(args.device)
    if args.rows:
        names = [n for n in args.rows.split(",") if n]
        known = {c.name for c in cases}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SystemExit(f"unknown rows {unknown}; rows on {args.device}: {sorted(known)}")
        return [c for c in cases if c.name in names]
    return [c for c in cases if c.quick or not args.quick]


def run(args) -> list:
    """Runs the rows, prints them, writes <out>/vllm_entry.{csv,json}; returns the rows."""
    common.check_device(args.device)
    device = args.device
    cpu = device == "cpu"
    heads = CPU_HEADS if cpu else GPU_HEADS
    if cpu:
        args.reps = min(args.reps, 3)
        # torch's idle intra-op threads spin between the entry point's small ops and contend
        # with the library's worker threads for the cores (the tests' conftest does the same).
        torch.set_num_threads(1)
    rounds = max(1, args.rounds or (2 if cpu or args.quick else 4))
    kv_dtypes = ([Q_DTYPE, common.FP8] if args.kv_dtype is None
                 else [common.kv_storage_dtype(args.kv_dtype, Q_DTYPE)])
    flashmsa = common.import_flashmsa()
    import flashmsa.integrations.vllm as ops
    import flashmsa.patterns  # noqa: F401 - make_q2k
    import flashmsa.reference  # noqa: F401 - evaluate_rows
    cases = select_cases(args)
    env = common.environment(device)
    print(f"vllm entry bench: {env}", flush=True)

    num_pages = max(pages_needed(c, sets_for(c, heads, kv_dtypes, device)) for c in cases)
    bf16 = PackedCache(num_pages, heads[1], device, Q_DTYPE)
    caches = [bf16 if d == Q_DTYPE else PackedCache(num_pages, heads[1], device, d, source=bf16)
              for d in kv_dtypes]
    caches += [c.with_token_scales() for c in caches if c.kv_dtype == common.FP8]
    del bf16   # freed when the run is fp8 only
    common.free_memory(device)
    print(f"packed cache: {num_pages} blocks, "
          + ", ".join(f"{c.label} {c.bytes() / 2**30:.2f} GiB" for c in caches
                      if not c.per_token)
          + f"; heads Hq {heads[0]} Hkv {heads[1]} topk {heads[2]}; {rounds} rounds of "
          f"{args.reps} reps per call", flush=True)

    rows = []
    extra = {"environment": env, "heads": heads, "target_ratio": TARGET_RATIO, "rounds": rounds}
    for i, case in enumerate(cases):
        seed = args.seed + 1000 * i
        torch.manual_seed(seed)
        n_sets = sets_for(case, heads, kv_dtypes, device)
        meta = Meta(common.cu_seqlens(case.q_lens, device),
                    torch.tensor(case.kv_lens, dtype=torch.int32, device=device),
                    torch.tensor(case.prefix_lens, dtype=torch.int32, device=device))
        # One set of inputs for both dtypes: the caches differ, q, indices and tables do not.
        sets = make_sets(flashmsa, case, caches[0], heads, n_sets, device, seed)
        for cache in caches:
            kv = cache.label
            r = {"case": case.name, "kind": case.kind, "batch": len(case.q_lens),
                 "q_tokens": sum(case.q_lens), "qlen_max": max(case.q_lens),
                 "kv_max": max(case.kv_lens), "prefix_max": max(case.prefix_lens),
                 "kv_dtype": kv, "sets": n_sets}
            try:
                r.update(run_row(flashmsa, ops, case, cache, sets, meta, heads, args, rounds))
            except Exception as e:  # noqa: BLE001 - one failing row must not end the run
                r.update(bitwise_equal=None, note=f"error: {type(e).__name__}: {e}"[:300])
            rows.append(r)
            print_row(r)
            # After every row: a run stopped by its time limit still leaves what it measured.
            common.write_outputs(args.out, "vllm_entry", rows, {**extra, "summary": summary(rows)})
        del sets
        common.free_memory(device)

    common.print_table(rows, [("case", "case", "{}"), ("kv_dtype", "K/V", "{}"),
                              ("sets", "sets", "{}"), ("direct_us", "direct us", "{:.2f}"),
                              ("entry_us", "entry us", "{:.2f}"),
                              ("overhead_us", "+us", "{:.2f}"), ("ratio", "ratio", "{:.4f}"),
                              ("within_2pct", "<=1.02", "{}"),
                              ("direct_spread_pct", "spread d%", "{:.2f}"),
                              ("entry_spread_pct", "spread e%", "{:.2f}"),
                              ("bitwise_equal", "bitwise", "{}"), ("note", "note", "{}")],
                       "vLLM entry points against msa_sparse_attention ("
                       + ("CPU wall clock: timings not judged)" if cpu
                          else "CUDA-graph replays, medians)"))
    s = summary(rows)
    print(f"bitwise equal outputs: {s['bitwise_equal']} of {s['rows']} rows")
    for case, cost in s["token_scale_cost"].items():
        print(f"per-token fp8 scales, direct call time over the fp8 row's: {case} {cost:.4f}"
              + ("" if cpu else (" (within 5%)" if cost <= TOKEN_SCALE_TARGET else " (OVER 5%)")))
    if s["within_2pct"] is not None:
        print(f"entry points within 2% of the direct call: {s['within_2pct']} of {s['timed']} "
              f"rows; worst ratio {s['worst_ratio']:.4f} ({s['worst_row']})")
    return rows


def print_row(r: dict) -> None:
    if "ratio" not in r:
        print(f"  {r['case']:28s} [{r['kv_dtype']}] {r['note']}", flush=True)
        return
    verdict = {True: "within 2%", False: "OVER 2%", None: "(cpu: not judged)"}[r["within_2pct"]]
    print(f"  {r['case']:28s} [{r['kv_dtype']}] direct {r['direct_us']:10.2f} us  entry "
          f"{r['entry_us']:10.2f} us  ratio {r['ratio']:.4f} {verdict}  outputs "
          f"{'bitwise equal' if r['bitwise_equal'] else 'DIFFER'}"
          + (f"  {r['note']}" if r["note"] else ""), flush=True)


def summary(rows: list) -> dict:
    timed = [r for r in rows if "ratio" in r]
    judged = [r for r in timed if r["within_2pct"] is not None]
    worst = max(timed, key=lambda r: r["ratio"], default=None)
    direct = {(r["case"], r["kv_dtype"]): r["direct_us"] for r in timed}
    token_cost = {case: us / direct[(case, "fp8")] for (case, kv), us in direct.items()
                  if kv == "fp8/token" and (case, "fp8") in direct}
    return {"token_scale_cost": token_cost,"rows": len(rows), "bitwise_equal": sum(r.get("bitwise_equal") is True for r in rows),
            "timed": len(timed),
            "within_2pct": sum(r["within_2pct"] for r in judged) if judged else None,
            "worst_ratio": worst["ratio"] if worst else None,
            "worst_row": f"{worst['case']} [{worst['kv_dtype']}]" if worst else None}


def failures(rows: list) -> list:
    """Rows whose outputs are not bitwise equal, whose check failed, or that errored."""
    return [f"{r['case']} [{r['kv_dtype']}]: {r['note'] or 'outputs differ'}" for r in rows
            if r.get("bitwise_equal") is not True or "FAILED" in r["note"]
            or "NON-FINITE" in r["note"]]


def main():
    common.run_checked(parse_args(), run, failures)


if __name__ == "__main__":
    main()
