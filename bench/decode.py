"""MSA decode benchmark (issue 4): paged bf16 K/V, MiniMax-M3 heads, `random` pattern, timed as
CUDA-graph replays, scored in GB/s over KV bytes (contract section 10) next to the copy
bandwidth measured in the same run.

Cases: batch 1 / 16 / 64 / 128 at KV 32768 with one query token, batch 64 at KV 131072, MTP
(8 query tokens per request) at batch 32; then the published decode suite (decode_suite_v1.csv,
8 query tokens per request, per-request KV lengths generated as the suite does) with its
weighted figures.

Baselines measured in the same run, on the issue-4 rows (GB/s over the same KV bytes): dense
SDPA of equal work (cuDNN and flash backends; per (request, KV head) a contiguous K/V holding
the row's KV bytes) and the gather-based PyTorch evaluation on the same paged inputs.

With --kv-dtype fp8, FlashMSA reads the same cache stored as float8_e4m3fn (the bf16 pages
divided by a per-tensor scale, passed as k_global_scale / v_global_scale), and its KV bytes count
one byte an element. With --kv-dtype nvfp4 it reads the same cache quantized to packed NVFP4
(flashmsa.quantize.quantize_nvfp4(pages, paged=True): uint8 pages (num_pages, Hkv, 128, D/2) and
a swizzled table of E4M3 block scales, passed as k_scale / v_scale), and its KV bytes count what
a key row of K or V is read as: D/2 bytes of values plus D/16 bytes of block scales (72 of D
128; the kv_scale_bytes column holds the scales' part). The quantized copies are made once for
the whole cache, before any timing: every set of every case reads them. The baselines keep the
bf16 cache and bf16 bytes. Rows and columns name their K/V dtype; issue 4's GB/s targets (set
for bf16 bytes) are left unjudged on fp8 and nvfp4 rows.

--kv-dtype all runs every case on bf16, fp8 and nvfp4 in one run (one cache, its fp8 and NVFP4
copies beside it; the same q and q2k for the three; the baselines once, on the bf16 row) and
prints each quantized row's time as a fraction of the bf16 call's on the issue-4 rows (issue 33:
batch 1 / 16 / 64 / 128 at KV 32768, batch 64 at KV 131072, multi-token prediction at batch 32).

    python3 -m bench.decode --out out/bench [--quick] [--device cpu] [--kv-dtype fp8|nvfp4|all]
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass

import torch

from . import common
from .baselines import sdpa_equal_work
from .common import HEAD_DIM, time_calls
from .gather_attention import gather_attention
from .selection import BLOCK, kv_bytes, select

Q_DTYPE = torch.bfloat16
BASELINE_KV = torch.bfloat16   # the baselines' K/V, whatever --kv-dtype says
BASELINES = ("sdpa_cudnn", "sdpa_flash", "gather")
GATHER_BUDGET_S = 5.0   # timed seconds the (slow) gather baseline may take per row


@dataclass
class DecodeCase:
    name: str
    suite: str            # "issue4", "full" or "low-latency"
    batch: int
    qlen: int             # query tokens per request
    kv_lens: list
    weight: float = 0.0
    target: str = ""      # issue 4's target for this row
    vllm: str = ""        # vLLM's Triton decode on the same H200 (design/performance.md)


# (name, batch, KV length, query tokens, target, vLLM Triton on this H200)
ISSUE4 = [("b1_kv32768", 1, 32768, 1, "<= 5 us", "6.8 us"),
          ("b16_kv32768", 16, 32768, 1, ">= 3400 GB/s", "2690 GB/s"),
          ("b64_kv32768", 64, 32768, 1, ">= 4000 GB/s", "3740 GB/s"),
          ("b128_kv32768", 128, 32768, 1, ">= 4000 GB/s", "3860 GB/s"),
          ("b64_kv131072", 64, 131072, 1, ">= 4000 GB/s", "3690 GB/s"),
          ("mtp8_b32_kv32768", 32, 32768, 8, ">= 3900 GB/s", "3540 GB/s")]


def suite_seq_lens(batch: int, nominal: int, qlen: int, seed: int = 1701) -> list:
    """Per-request KV lengths of the published suite (data README): batch // 2 deltas drawn
    uniformly from [nominal // 20, nominal // 4] on a CPU generator seeded with
    seed + batch * 1009 + nominal, emitted as nominal -/+ delta (plus one nominal request for an
    odd batch), then permuted with the same generator. The mean is exactly `nominal`."""
    gen = torch.Generator().manual_seed(seed + batch * 1009 + nominal)
    low = max(1, nominal // 20)
    high = max(low, nominal // 4)
    deltas = torch.randint(low, high + 1, (batch // 2,), generator=gen, dtype=torch.int64)
    parts = [nominal - deltas, nominal + deltas]
    if batch % 2:
        parts.append(torch.tensor([nominal], dtype=torch.int64))
    lens = torch.cat(parts)[torch.randperm(batch, generator=gen)]
    assert int(lens.sum()) == batch * nominal and int(lens.min()) >= qlen
    return lens.tolist()


def suite_cases(suites):
    cases = []
    with open(common.workload_file("decode_suite_v1.csv")) as f:
        for row in csv.DictReader(f):
            if row["suite"] not in suites:
                continue
            b, n, ql = int(row["batch_size"]), int(row["nominal_seq_len"]), int(row["q_len_per_req"])
            cases.append(DecodeCase(f"{row['suite']}_b{b}_s{n}_q{ql}", row["suite"], b, ql,
                                    suite_seq_lens(b, n, ql), float(row["weight"])))
    return cases


def build_cases(args):
    if args.device == "cpu":
        issue4 = [DecodeCase("b1_kv1000", "issue4", 1, 1, [1000]),
                  DecodeCase("b3_kv1000_mtp8", "issue4", 3, 8, [1000, 77, 555])]
        return issue4 + [c for c in suite_cases({"full"}) if c.kv_lens and
                         max(c.kv_lens) <= 1300 and c.batch <= 8]
    cases = [DecodeCase(n, "issue4", b, ql, [kv] * b, target=t, vllm=v)
             for n, b, kv, ql, t, v in ISSUE4]
    low_latency = not args.quick or args.low_latency
    return cases + suite_cases({"full", "low-latency"} if low_latency else {"full"})


def page_bytes_per_head(kv_dtype: torch.dtype) -> int:
    """K + V bytes of one page of one KV head (NVFP4: its block scales included)."""
    return 2 * BLOCK * common.kv_row_bytes(kv_dtype, HEAD_DIM)


def msa_kv_dtypes(kv_dtype: str) -> list:
    """FlashMSA's K/V storages for --kv-dtype, in the order their rows run (all: bf16 first,
    the row the others' ratios are to)."""
    if kv_dtype == "all":
        return [Q_DTYPE, common.FP8, common.NVFP4]
    return [common.kv_storage_dtype(kv_dtype, Q_DTYPE)]


class PagedCache:
    """One K and one V cache (num_pages, Hkv, 128, D), filled once with randn / 3 and shared by
    every case; each case maps its requests to disjoint random pages.

    k, v: the bf16 pages (the baselines read them). stores: FlashMSA's K/V for each storage of
    kv_dtype (one dtype or a list; common.StoredKV): the same pages, their fp8 copies with
    per-tensor descales, or their NVFP4 quantization (quantize_nvfp4(pages, paged=True)) with
    swizzled block-scale tables, each made once for the whole cache. msa_k, msa_v, scales (the
    call's scale arguments) and kv_dtype: the first storage's."""

    def __init__(self, num_pages: int, num_kv_heads: int, device: str,
                 kv_dtype: torch.dtype | list = BASELINE_KV):
        shape = (num_pages, num_kv_heads, BLOCK, HEAD_DIM)
        self.k = torch.empty(shape, dtype=BASELINE_KV, device=device).normal_(0, 1 / 3)
        self.v = torch.empty(shape, dtype=BASELINE_KV, device=device).normal_(0, 1 / 3)
        self.num_pages = num_pages
        dtypes = list(kv_dtype) if isinstance(kv_dtype, (list, tuple)) else [kv_dtype]
        self.stores = {d: common.store_kv(self.k, self.v, d, paged=True) for d in dtypes}
        first = self.stores[dtypes[0]]
        self.msa_k, self.msa_v, self.scales, self.kv_dtype = (first.k, first.v, first.scales,
                                                              first.dtype)

    def bytes(self) -> int:
        own = sum(x.numel() * x.element_size() for x in (self.k, self.v))
        return own + sum(s.bytes() for s in self.stores.values() if s.k is not self.k)

    def page_tables(self, kv_lens, n_sets: int, device: str):
        """n_sets page tables (B, max_pages) over disjoint random pages; unused entries -1."""
        pages = torch.tensor([math.ceil(n / BLOCK) for n in kv_lens], device=device)
        starts = torch.cumsum(pages, 0) - pages
        slot = torch.arange(int(pages.max()), device=device)
        used = slot[None, :] < pages[:, None]
        perm = torch.randperm(self.num_pages, device=device)
        per_set = int(pages.sum())
        tables = []
        for i in range(n_sets):
            where = (i * per_set + starts[:, None] + slot[None, :]).clamp(max=self.num_pages - 1)
            tables.append(torch.where(used, perm[where], -1).to(torch.int32))
        return tables


def pages_needed(case: DecodeCase, n_sets: int) -> int:
    return n_sets * sum(math.ceil(n / BLOCK) for n in case.kv_lens)


def estimated_sets(case: DecodeCase, heads, device, kv_dtype: torch.dtype = BASELINE_KV) -> int:
    """Rotation sets that keep FlashMSA's K/V reads (in their storage) out of L2."""
    _, hkv, topk = heads
    per_call = case.batch * hkv * min(case.qlen * topk, 4096) * page_bytes_per_head(kv_dtype)
    return common.rotation_sets(per_call, device)


def run_case(case, cache, heads, flashmsa, args, seed, store=None, baselines=True):
    """One row: FlashMSA on `store` (one of cache.stores; default the cache's first), and on an
    issue-4 case the baselines too unless baselines=False."""
    device = args.device
    hq, hkv, topk = heads
    store = next(iter(cache.stores.values())) if store is None else store
    total_q = case.batch * case.qlen
    n_sets = estimated_sets(case, heads, device, store.dtype)
    cu_q = common.cu_seqlens([case.qlen] * case.batch, device)
    seqused = torch.tensor(case.kv_lens, dtype=torch.int32, device=device)
    sets = []
    for i, table in enumerate(cache.page_tables(case.kv_lens, n_sets, device)):
        q2k = flashmsa.patterns.make_q2k("random", [case.qlen] * case.batch, case.kv_lens, hkv,
                                         topk, causal=True, seed=seed + i, device=device)
        q = common.randn((total_q, hq, HEAD_DIM), Q_DTYPE, device)
        sets.append(dict(q=q, q2k=q2k, table=table, out=torch.full_like(q, float("nan"))))
    sel = select(sets[0]["q2k"], cu_q, seqused, causal=True, max_pages=sets[0]["table"].shape[1])
    # Section 10's KV bytes in each reader's storage: FlashMSA's (1 byte an element for fp8;
    # NVFP4 D/2 bytes a row plus D/16 of block scales) and the baselines' bf16.
    nbytes = kv_bytes(sel, case.batch, HEAD_DIM, row_bytes=common.kv_row_bytes(store.dtype))
    scale_bytes = kv_bytes(sel, case.batch, HEAD_DIM,
                           row_bytes=common.kv_scale_row_bytes(store.dtype))
    baseline_bytes = kv_bytes(sel, case.batch, HEAD_DIM, cache.k.element_size())

    attn = flashmsa.msa_sparse_attention
    fns = [lambda s=s: attn(s["q"], store.k, store.v, s["q2k"], cu_q, None, causal=True,
                            page_table=s["table"], seqused_k=seqused, out=s["out"],
                            **store.scales)
           for s in sets]
    t = time_calls(fns, device, args.reps, args.warmup, graph=True)

    s = sets[0]
    rel = common.sampled_error(flashmsa, s["out"], dict(
        q=s["q"], k=store.k, v=store.v, q2k_indices=s["q2k"], cu_seqlens_q=cu_q,
        causal=True, page_table=s["table"], seqused_k=seqused, **store.scales))
    row = dict(kv_dtype=store.name, time_us=t.seconds * 1e6, reps=t.reps,
               method=t.method, sets=n_sets, kv_bytes=nbytes, kv_scale_bytes=scale_bytes,
               GBps=nbytes / t.seconds / 1e9, check_rel_l2=rel, note=common.check_note(rel))
    if case.suite == "issue4" and baselines:
        row.update(run_baselines(case, sets, cache, cu_q, seqused, heads, baseline_bytes, args))
    return row


def run_baselines(case, sets, cache, cu_q, seqused, heads, nbytes, args):
    """The same-run baselines of one row on the bf16 cache, each as `<impl>_GBps` (over its own
    K/V bytes for the dense ones, which equal the row's to within one block per (request, KV
    head), and over the row's KV bytes for gather); nbytes are the row's KV bytes in bf16. A
    baseline that cannot run leaves a note instead."""
    device = args.device
    hq, hkv, _ = heads
    per_key = case.batch * hkv * HEAD_DIM * 2 * cache.k.element_size()  # K + V of one key
    keys = max(BLOCK, round(nbytes / per_key / BLOCK) * BLOCK)
    results, notes = {"baseline_kv_dtype": common.dtype_name(cache.k.dtype)}, []
    for impl in BASELINES:
        try:
            if impl == "gather":
                fns = [lambda s=s: gather_attention(s["q"], cache.k, cache.v, s["q2k"], cu_q,
                                                    causal=True, page_table=s["table"],
                                                    seqused_k=seqused) for s in sets]
                t = time_calls(fns, device, args.reps, args.warmup, graph=False,
                               budget_s=GATHER_BUDGET_S)
                results[f"{impl}_GBps"] = nbytes / t.seconds / 1e9
            else:
                dense_bytes = keys * per_key
                n_sets = common.rotation_sets(dense_bytes, device)
                fns, _, note = sdpa_equal_work(impl, case.qlen, keys, hq, hkv, device, n_sets,
                                               batch=case.batch)
                t = time_calls(fns, device, args.reps, args.warmup, graph=True)
                results[f"{impl}_GBps"] = dense_bytes / t.seconds / 1e9
                if note != "enable_gqa":
                    notes.append(f"{impl}: {note}")
        except Exception as e:  # noqa: BLE001 - a baseline that cannot run must not end the row
            notes.append(f"{impl}: {type(e).__name__}: {e}"[:120])
        common.free_memory(device)
    if notes:
        results["baseline_note"] = "; ".join(notes)
    return results


def meets(target: str, r: dict):
    if not target or "GBps" not in r:
        return None
    op, value, unit = target.split()
    if unit != "us" and r.get("kv_dtype") != common.dtype_name(BASELINE_KV):
        return None   # issue 4's GB/s targets count bf16 bytes: not comparable
    got = r["time_us"] if unit == "us" else r["GBps"]
    return got <= float(value) if op == "<=" else got >= float(value)


def weighted(rows, suite, kv_dtype=None):
    """The suite's weighted figures over its timed rows (of one K/V dtype when given)."""
    rs = [r for r in rows if r["suite"] == suite and r.get("GBps") and r["weight"] > 0
          and kv_dtype in (None, r.get("kv_dtype"))]
    if not rs:
        return None
    w = sum(r["weight"] for r in rs)
    return {"GBps": sum(r["weight"] * r["kv_bytes"] for r in rs)
            / sum(r["weight"] * r["time_us"] * 1e-6 for r in rs) / 1e9,
            "weighted_mean_latency_us": sum(r["weight"] * r["time_us"] for r in rs) / w,
            "cases": len(rs)}


def ratio_rows(rows, base: str, others) -> list:
    """Per issue-4 case, each other K/V dtype's call time over the `base` row's of the same case
    (issue 33's fractions of the bf16 call's time), None where either is untimed."""
    table = []
    for case in dict.fromkeys(r["case"] for r in rows if r["suite"] == "issue4"):
        by_kv = {r.get("kv_dtype"): r for r in rows if r["case"] == case and r.get("time_us")}
        first = next(r for r in rows if r["case"] == case)
        t = {"case": case, "batch": first["batch"], "qlen": first["qlen"],
             "kv_mean": first["kv_mean"], base: by_kv.get(base, {}).get("time_us")}
        for kv in others:
            t[kv] = by_kv.get(kv, {}).get("time_us")
            t[f"{kv}_x"] = t[kv] / t[base] if t[kv] and t[base] else None
        table.append(t)
    return table


def main():
    p = common.base_parser(__doc__.splitlines()[0],
                           kv_dtypes=common.KV_DTYPES_NVFP4 + ("all",))
    p.add_argument("--low-latency", action="store_true",
                   help="with --quick: also the published suite's low-latency rows (batch 1-4)")
    args = p.parse_args()
    with common.launch_overrides(args.launch_overrides):
        run(args)


def run(args):
    common.check_device(args.device)
    heads = (8, 2, 4) if args.device == "cpu" else (64, 4, 16)
    kv_dtypes = msa_kv_dtypes(args.kv_dtype)
    kv_names = [common.dtype_name(d) for d in kv_dtypes]
    multi = len(kv_dtypes) > 1
    # The label of FlashMSA's columns: its one K/V dtype, or (--kv-dtype all) every one, each
    # row's in the K/V column.
    msa_kv, baseline_kv = "/".join(kv_names), common.dtype_name(BASELINE_KV)
    if args.device == "cpu":
        args.reps = min(args.reps, 3)
    flashmsa = common.import_flashmsa()
    import flashmsa.patterns  # noqa: F401 - make_q2k
    import flashmsa.reference  # noqa: F401 - evaluate_rows
    env = common.environment(args.device)
    print(f"decode bench: {env}", flush=True)
    ceilings = common.measure_ceilings(args.device, args.reps)
    copy = ceilings["copy_GBps"]
    print(f"ceilings: {ceilings}", flush=True)

    cases = build_cases(args)
    num_pages = max(pages_needed(c, estimated_sets(c, heads, args.device, d))
                    for c in cases for d in kv_dtypes)
    # The quantized copies are made here, once, outside every timed region.
    cache = PagedCache(num_pages, heads[1], args.device, kv_dtypes)
    print(f"paged cache: {num_pages} pages, {cache.bytes() / 2**30:.1f} GiB K+V (msa reads "
          f"{msa_kv}, baselines {baseline_kv})", flush=True)

    def summarize():
        aggs = {kv: {s: a for s in ("full", "low-latency") if (a := weighted(rows, s, kv))}
                for kv in kv_names}
        ratios = ratio_rows(rows, kv_names[0], kv_names[1:]) if multi else []
        return aggs, ratios

    rows = []
    for i, case in enumerate(cases):
        for j, kv_dtype in enumerate(kv_dtypes):
            kv = kv_names[j]
            r = {"case": case.name, "suite": case.suite, "batch": case.batch, "qlen": case.qlen,
                 "kv_mean": sum(case.kv_lens) / len(case.kv_lens), "kv_min": min(case.kv_lens),
                 "kv_max": max(case.kv_lens), "weight": case.weight, "kv_dtype": kv}
            try:
                # The same seed for every K/V dtype of a case: the same q and q2k. The baselines
                # read the bf16 cache whatever the row's dtype: once per case.
                r.update(run_case(case, cache, heads, flashmsa, args, args.seed + 1000 * i,
                                  store=cache.stores[kv_dtype], baselines=j == 0))
                r["pct_copy"] = 100 * r["GBps"] / copy
            except Exception as e:  # noqa: BLE001 - one failing case must not end the run
                r["note"] = f"error: {type(e).__name__}: {e}"[:300]
            r.update(target=case.target, meets=meets(case.target, r), vllm_triton=case.vllm)
            base = rows[-j] if j else None   # this case's first (bf16) row
            if base is not None and r.get("time_us") and base.get("time_us"):
                r[f"time_vs_{kv_names[0]}"] = r["time_us"] / base["time_us"]
            rows.append(r)
            baselines = "".join(f" {impl} {r[f'{impl}_GBps']:.0f}" for impl in BASELINES
                                if r.get(f"{impl}_GBps") is not None)
            ratio = r.get(f"time_vs_{kv_names[0]}")
            # "name us GB/s" first: scripts/ab_decode.py reads the rows in that order.
            print(f"  {case.name:26s} " + (f"{r['time_us']:9.2f} us {r['GBps']:8.0f} GB/s "
                  f"[{kv}] ({r['pct_copy']:.0f}% of copy)"
                  + (f" {ratio:.3f}x {kv_names[0]}" if ratio is not None else "")
                  + f" {r['note']}" if "GBps" in r else r["note"]) +
                  (f" | baselines [{baseline_kv}] (GB/s):{baselines}" if baselines else ""),
                  flush=True)
            common.free_memory(args.device)
            # After every row: a run stopped by its time limit still leaves what it measured.
            aggs, ratios = summarize()
            common.write_outputs(args.out, "decode", rows, {
                "environment": env, "ceilings": ceilings, "suite_weighted": aggs[kv_names[0]],
                "suite_weighted_by_kv_dtype": aggs, "kv_dtype_ratios": ratios, "heads": heads,
                "kv_dtype": {"msa": msa_kv, "baselines": baseline_kv}})

    aggs, ratios = summarize()
    # Every timed column names the K/V dtype its bytes are counted in.
    columns = [("case", "case", "{}"), ("batch", "B", "{}"), ("qlen", "q", "{}"),
               ("kv_mean", "kv mean", "{:.0f}")]
    if multi:
        columns += [("kv_dtype", "K/V", "{}"),
                    (f"time_vs_{kv_names[0]}", f"x {kv_names[0]} time", "{:.3f}")]
    columns += [("time_us", f"msa[{msa_kv}] us", "{:.2f}"),
                ("GBps", f"msa[{msa_kv}] GB/s", "{:.0f}"),
                ("pct_copy", "%copy", "{:.0f}"),
                ("target", "target", "{}"), ("meets", "ok", "{}"),
                ("vllm_triton", "vLLM Triton[bf16]", "{}"),
                ("sdpa_cudnn_GBps", f"cuDNN dense[{baseline_kv}]", "{:.0f}"),
                ("sdpa_flash_GBps", f"flash dense[{baseline_kv}]", "{:.0f}"),
                ("gather_GBps", f"gather[{baseline_kv}]", "{:.0f}"),
                ("note", "note", "{}"), ("baseline_note", "baselines", "{}")]
    common.print_table(rows, columns,
                       f"decode: GB/s over KV bytes (contract section 10), msa K/V {msa_kv}, "
                       f"baselines {baseline_kv}")
    if multi:
        base = kv_names[0]
        common.print_table(ratios, [("case", "case", "{}"), ("batch", "B", "{}"),
                                    ("qlen", "q", "{}"), ("kv_mean", "kv mean", "{:.0f}"),
                                    (base, f"{base} us", "{:.2f}")]
                           + [c for kv in kv_names[1:] for c in
                              ((kv, f"{kv} us", "{:.2f}"), (f"{kv}_x", f"{kv}/{base}", "{:.3f}"))],
                           f"decode: each K/V dtype's call time as a fraction of the {base} "
                           f"call's, same run (issue-4 rows)")
    # The first K/V dtype's (bf16's in an all run) last: scripts/gpu_check.sh takes the last
    # "decode suite full" line.
    for kv in reversed(kv_names):
        for s, a in aggs[kv].items():
            # "decode suite full: weighted <GB/s>" first: scripts/gpu_check.sh and ab_decode.py
            # read that.
            print(f"decode suite {s}: weighted {a['GBps']:.0f} GB/s over KV bytes "
                  f"({100 * a['GBps'] / copy:.0f}% of copy), weighted mean latency "
                  f"{a['weighted_mean_latency_us']:.1f} us, {a['cases']} cases, K/V {kv}")
    print(f"ceilings: copy {copy:.0f} GB/s, bf16 matmul {ceilings['matmul_TFLOPs']:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
