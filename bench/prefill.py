"""MSA prefill benchmark: FlashMSA against dense SDPA of equal work, FlexAttention and a
gather-based PyTorch evaluation, in one run, next to the machine's copy and matmul ceilings.

Cases: MiniMax-M3 prefill (batch 1, causal, Hq 64, Hkv 4, D 128, topk 16, bf16) at
S = 8192 / 32768 / 131072 for each selection pattern, and the single-request representative
production prefill shapes (indexer pattern; query_len = total_q, prefix = max_final_kv - total_q,
bottom-right causal), with their production-weighted aggregate
sum(w * useful_flops) / sum(w * time). Useful FLOPs are counted exactly from the q2k indices
(contract section 10).

With --kv-dtype fp8, FlashMSA reads K/V stored as float8_e4m3fn (the bf16 data divided by a
per-tensor scale, passed as k_global_scale / v_global_scale); with --kv-dtype nvfp4 it reads the
same data quantized to packed NVFP4 (flashmsa.quantize.quantize_nvfp4(k), flat: uint8
(S_k, Hkv, D/2) and a swizzled table of E4M3 block scales, passed as k_scale / v_scale). Each
input set is quantized once, when it is made, outside the timed region. The baselines run on the
bf16 data, so the table shows fp8 or NVFP4 FlashMSA beside the same baselines. Every row and
column names its K/V dtype; the useful FLOPs are the same for every K/V dtype.

    python3 -m bench.prefill --out out/bench [--quick] [--device cpu] [--kv-dtype fp8|nvfp4]
"""
from __future__ import annotations

import csv
import time
from dataclasses import dataclass, replace

import torch

from . import common
from .baselines import flex_block_mask, flex_calls, sdpa_equal_work
from .common import HEAD_DIM, Timing, randn, time_calls
from .gather_attention import gather_attention
from .selection import select, union_stats

PATTERNS = ("random", "clustered", "indexer")
IMPLS = ("msa", "sdpa_cudnn", "sdpa_flash", "flex", "gather")
KEYS_PER_QUERY = 2048   # topk 16 x 128: the dense baseline's keys per query
Q_DTYPE = torch.bfloat16
BASELINE_KV = common.dtype_name(Q_DTYPE)   # the baselines' K/V, whatever --kv-dtype says


@dataclass
class Case:
    name: str
    group: str          # "m3" or "production"
    pattern: str
    seqlen_q: int
    seqlen_k: int
    num_qo_heads: int
    num_kv_heads: int
    topk: int
    weight: float = 0.0


@dataclass
class InputSet:
    q: torch.Tensor
    k: torch.Tensor             # bf16: the baselines' K/V
    v: torch.Tensor
    out: torch.Tensor
    msa: common.StoredKV        # FlashMSA's K/V: k and v themselves, or their fp8 / NVFP4 forms
                                # with the call's scale arguments (msa.scales)


def parse_args():
    p = common.base_parser(__doc__.splitlines()[0], kv_dtypes=common.KV_DTYPES_NVFP4)
    p.add_argument("--sizes", default=None, help="comma-separated S for the M3 cases "
                   "(default 8192,32768,131072; quick 8192,32768)")
    p.add_argument("--patterns", default=",".join(PATTERNS))
    p.add_argument("--impls", default=",".join(IMPLS), help="subset of " + ",".join(IMPLS))
    p.add_argument("--production", choices=("on", "off"), default="on")
    p.add_argument("--production-impls", default=None,
                   help="impls for the production cases (default msa,sdpa_cudnn,gather; "
                        "quick msa,sdpa_cudnn)")
    p.add_argument("--flex-budget", type=float, default=None,
                   help="seconds for FlexAttention's mask build + compile + first call at one "
                        "size; past it the larger sizes skip flex (default 120, quick 60)")
    p.add_argument("--baseline-budget", type=float, default=None,
                   help="seconds of timed loop per slow baseline measurement (reps drop, "
                        "never below 5; default 20, quick 8)")
    p.add_argument("--union-seqlen", type=int, default=None,
                   help="S of the union statistics (default 32768)")
    return p.parse_args()


def m3_cases(sizes, patterns, heads):
    hq, hkv, topk = heads
    return [Case(f"m3_{p}_S{s}", "m3", p, s, s, hq, hkv, topk) for s in sizes for p in patterns]


def production_cases(heads, shrink: int = 1):
    """Representative single-request rows of prefill_benchmark_cases_v1.csv. shrink > 1 divides
    the lengths (the CPU tiny mode only checks code paths)."""
    hq, hkv, topk = heads
    cases = []
    with open(common.workload_file("prefill_benchmark_cases_v1.csv")) as f:
        for row in csv.DictReader(f):
            if "representative" not in row["tags"].split(";") or int(row["batch_size"]) != 1:
                continue
            sq, sk = int(row["total_q"]), int(row["max_final_kv"])
            sq, sk = max(1, sq // shrink), max(1, sk // shrink)
            cases.append(Case(row["case_id"], "production", "indexer", sq, sk, hq, hkv, topk,
                              float(row["representative_weight"])))
    return sorted(cases, key=lambda c: (c.seqlen_k, c.seqlen_q))


def make_sets(case: Case, n_sets: int, device: str, kv_dtype: torch.dtype = Q_DTYPE):
    """n_sets inputs of randn / 3; with fp8 or NVFP4 K/V, FlashMSA's are the bf16 K/V converted
    or quantized (flat), once per set."""
    sets = []
    for _ in range(n_sets):
        q = randn((case.seqlen_q, case.num_qo_heads, HEAD_DIM), Q_DTYPE, device)
        k = randn((case.seqlen_k, case.num_kv_heads, HEAD_DIM), Q_DTYPE, device)
        v = randn((case.seqlen_k, case.num_kv_heads, HEAD_DIM), Q_DTYPE, device)
        sets.append(InputSet(q, k, v, torch.full_like(q, float("nan")),
                             common.store_kv(k, v, kv_dtype, paged=False)))
    return sets


def set_bytes(case: Case, kv_dtype: torch.dtype = Q_DTYPE) -> int:
    """Bytes FlashMSA touches in one set: q and out in bf16, K and V in their storage (NVFP4:
    D/2 bytes a row plus D/16 of block scales)."""
    return (2 * 2 * HEAD_DIM * case.seqlen_q * case.num_qo_heads
            + 2 * common.kv_row_bytes(kv_dtype, HEAD_DIM) * case.seqlen_k * case.num_kv_heads)


class Runner:
    """Runs the implementations of one benchmark on its cases and collects the rows."""

    def __init__(self, args, flashmsa):
        self.args = args
        self.flashmsa = flashmsa
        self.device = args.device
        self.rows = []
        self.flex_skip_from = None   # S at and past which flex is skipped, with the reason
        self.flex_skip_reason = ""
        self.kv_dtype = common.kv_storage_dtype(args.kv_dtype, Q_DTYPE)
        self.msa_kv = common.dtype_name(self.kv_dtype)

    def row(self, case: Case, impl: str, flops=None, timing: Timing | None = None, **extra):
        r = {"case": case.name, "group": case.group, "pattern": case.pattern,
             "seqlen_q": case.seqlen_q, "seqlen_k": case.seqlen_k, "impl": impl,
             "kv_dtype": self.msa_kv if impl == "msa" else BASELINE_KV,
             "weight": case.weight, "flops": flops}
        if timing is not None:
            r.update(time_ms=timing.seconds * 1e3, tflops=flops / timing.seconds / 1e12,
                     reps=timing.reps, method=timing.method)
        r.update(extra)
        self.rows.append(r)
        status = (f"{r['time_ms']:9.3f} ms {r['tflops']:7.1f} TFLOP/s ({r['method']}, "
                  f"{r['reps']} reps)" if timing else f"-- {extra.get('note', '')}")
        print(f"  {impl:11s} [{r['kv_dtype']}] {status}", flush=True)
        return r

    def run_case(self, case: Case, impls, seed: int):
        args, device = self.args, self.device
        print(f"{case.name}: S_q {case.seqlen_q} S_k {case.seqlen_k} {case.pattern}", flush=True)
        torch.manual_seed(seed)
        cu_q = common.cu_seqlens([case.seqlen_q], device)
        cu_k = common.cu_seqlens([case.seqlen_k], device)
        q2k = self.flashmsa.patterns.make_q2k(case.pattern, [case.seqlen_q], [case.seqlen_k],
                                             case.num_kv_heads, case.topk, causal=True,
                                             seed=seed, device=device)
        group = case.num_qo_heads // case.num_kv_heads
        keys = self.flashmsa.reference.keys_read(q2k, cu_q, cu_k, causal=True)
        flops = 4 * HEAD_DIM * group * int(keys.sum())
        n_sets = common.rotation_sets(set_bytes(case, self.kv_dtype), device)
        sets = make_sets(case, n_sets, device, self.kv_dtype)
        budget = args.baseline_budget

        for impl in impls:
            try:
                if impl == "msa":
                    self.run_msa(case, sets, q2k, cu_q, cu_k, flops)
                elif impl == "gather":
                    fns = [lambda s=s: gather_attention(s.q, s.k, s.v, q2k, cu_q, cu_k,
                                                        causal=True) for s in sets]
                    t = time_calls(fns, device, args.reps, args.warmup, graph=False,
                                   budget_s=budget)
                    self.row(case, impl, flops, t)
                elif impl.startswith("sdpa"):
                    dense = replace(case, seqlen_k=KEYS_PER_QUERY)
                    fns, dense_flops, note = sdpa_equal_work(
                        impl, case.seqlen_q, KEYS_PER_QUERY, case.num_qo_heads,
                        case.num_kv_heads, device, common.rotation_sets(set_bytes(dense), device))
                    t = time_calls(fns, device, args.reps, args.warmup, graph=True)
                    self.row(case, impl, dense_flops, t, note=f"dense, {note}")
                elif impl == "flex":
                    self.run_flex(case, sets, q2k, cu_q, cu_k, flops)
            except Exception as e:  # noqa: BLE001 - one failing implementation must not end the run
                self.row(case, impl, flops, note=f"error: {type(e).__name__}: {e}"[:300])
            common.free_memory(device)
        del sets
        common.free_memory(device)

    def run_msa(self, case, sets, q2k, cu_q, cu_k, flops):
        attn = self.flashmsa.msa_sparse_attention
        fns = [lambda s=s: attn(s.q, s.msa.k, s.msa.v, q2k, cu_q, cu_k, causal=True, out=s.out,
                                **s.msa.scales)
               for s in sets]
        t = time_calls(fns, self.device, self.args.reps, self.args.warmup, graph=True)
        s = sets[0]
        rel = common.sampled_error(self.flashmsa, s.out, dict(
            q=s.q, k=s.msa.k, v=s.msa.v, q2k_indices=q2k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
            causal=True, **s.msa.scales))
        self.row(case, "msa", flops, t, check_rel_l2=rel, note=common.check_note(rel))

    def run_flex(self, case, sets, q2k, cu_q, cu_k, flops):
        if self.flex_skip_from is not None and case.seqlen_q >= self.flex_skip_from:
            self.row(case, "flex", flops, note=self.flex_skip_reason)
            return
        t0 = time.perf_counter()
        sel = select(q2k, cu_q, cu_k[1:] - cu_k[:-1], causal=True)
        mask = flex_block_mask(sel, case.seqlen_q, case.seqlen_k, case.num_qo_heads,
                               q_offset=case.seqlen_k - case.seqlen_q)
        fns = flex_calls(sets, mask, self.device)
        fns[0]()
        if self.device == "cuda":
            torch.cuda.synchronize()
        setup = time.perf_counter() - t0
        t = time_calls(fns, self.device, self.args.reps, self.args.warmup, graph=False,
                       budget_s=self.args.baseline_budget)
        self.row(case, "flex", flops, t, setup_s=setup)
        if setup > self.args.flex_budget:
            self.flex_skip_from = case.seqlen_q + 1
            self.flex_skip_reason = (f"skipped: flex mask build + compile + first call took "
                                     f"{setup:.0f} s at S={case.seqlen_q} (budget "
                                     f"{self.args.flex_budget:.0f} s)")


def union_table(flashmsa, seqlen: int, patterns, heads, device, seed):
    rows = []
    _, hkv, topk = heads
    cu = common.cu_seqlens([seqlen], device)
    for p in patterns:
        q2k = flashmsa.patterns.make_q2k(p, [seqlen], [seqlen], hkv, topk, causal=True,
                                         seed=seed, device=device)
        stats = union_stats(select(q2k, cu, cu[1:], causal=True))
        rows.append({"pattern": p, "seqlen": seqlen, "topk": topk,
                     **{f"tile{t}": v for t, v in stats.items()},
                     **{f"tile{t}_x": v / topk for t, v in stats.items()}})
    return rows


def aggregates(rows):
    """Production-weighted useful TFLOP/s per implementation, over the production cases it ran
    (sum(w * flops) / sum(w * time)); the case count says whether that is all of them."""
    out = {}
    for impl in IMPLS:
        rs = [r for r in rows if r["group"] == "production" and r["impl"] == impl]
        timed = [r for r in rs if r.get("time_ms")]
        if timed:
            num = sum(r["weight"] * r["flops"] for r in timed)
            den = sum(r["weight"] * r["time_ms"] * 1e-3 for r in timed)
            out[impl] = {"TFLOPs": num / den / 1e12, "cases": len(timed), "of": len(rs),
                         "kv_dtype": timed[0]["kv_dtype"],
                         "weighted_mean_latency_ms":
                             sum(r["weight"] * r["time_ms"] for r in timed)
                             / sum(r["weight"] for r in timed)}
    return out


def plot(rows, path, heads):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(matplotlib not available: no plot written to {path})")
        return
    cases = list(dict.fromkeys(r["case"] for r in rows))
    label = {r["case"]: (f"{r['pattern']} S={r['seqlen_q']}" if r["group"] == "m3" else
                         f"q {r['seqlen_q']} kv {r['seqlen_k']} (w {r['weight']:.0f})")
             for r in rows}
    impls = [i for i in IMPLS if any(r["impl"] == i and r.get("tflops") for r in rows)]
    value = {(r["case"], r["impl"]): r.get("tflops") for r in rows}
    kv = {r["impl"]: r["kv_dtype"] for r in rows}
    width = 0.8 / max(1, len(impls))
    fig, ax = plt.subplots(figsize=(max(8.0, 0.45 * len(cases) + 2), 5))
    for j, impl in enumerate(impls):
        xs = [i + j * width for i in range(len(cases))]
        ax.bar(xs, [value.get((c, impl)) or 0.0 for c in cases], width,
               label=f"{impl} (K/V {kv[impl]})")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))])
    ax.set_xticklabels([label[c] for c in cases], rotation=60, ha="right", fontsize=7)
    # Log scale: the baselines span 3 to 700 TFLOP/s.
    ax.set_yscale("log")
    ax.set_ylabel("TFLOP/s (useful; SDPA: dense of equal work)")
    ax.set_title("MSA prefill, q bf16, K/V as labelled, Hq {} Hkv {} D 128 topk {}, causal\n"
                 "M3 shapes by pattern, then single-request production shapes (indexer)"
                 .format(*heads), fontsize=9)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def summary(rows, ceilings, union_rows, aggs):
    kv = {r["impl"]: r["kv_dtype"] for r in rows}
    by_case = {}
    for r in rows:
        c = by_case.setdefault(r["case"], {"case": r["case"][:28], "pattern": r["pattern"],
                                            "S_q": r["seqlen_q"], "S_k": r["seqlen_k"],
                                            "w": r["weight"] or None})
        if r.get("tflops"):
            c[r["impl"]] = r["tflops"]
            if r["impl"] == "msa":
                c["msa_ms"] = r["time_ms"]
        else:
            c[r["impl"]] = "skip" if "skipped" in str(r.get("note")) else "err"
    # Every implementation's column carries its K/V dtype: with --kv-dtype fp8, FlashMSA's
    # differs from the baselines'.
    cols = [("case", "case", "{}"), ("pattern", "pattern", "{}"), ("S_q", "S_q", "{}"),
            ("S_k", "S_k", "{}"), ("w", "weight", "{:.0f}"),
            ("msa_ms", f"msa[{kv.get('msa', '-')}] ms", "{:.3f}")]
    cols += [(i, f"{i}[{kv[i]}]", "{:.1f}") for i in IMPLS
             if any(i in c for c in by_case.values())]
    common.print_table(list(by_case.values()), cols, "prefill: TFLOP/s (useful; SDPA dense of "
                       "equal work); [K/V dtype], q bf16")
    if union_rows:
        common.print_table(union_rows, [("pattern", "pattern", "{}"), ("seqlen", "S", "{}")]
                           + [(f"tile{t}", f"{t} tok", "{:.1f}") for t in (8, 16, 64, 128)]
                           + [(f"tile{t}_x", f"x{t}", "{:.1f}") for t in (8, 16, 64, 128)],
                           "distinct blocks per KV head per tile (and x topk)")
    for impl, a in aggs.items():
        # K/V at the end: scripts/ab_decode.py reads "aggregate msa : <TFLOP/s>".
        print(f"production-weighted aggregate {impl:10s}: {a['TFLOPs']:7.1f} useful TFLOP/s "
              f"over {a['cases']}/{a['of']} single-request representative cases, weighted mean "
              f"latency {a['weighted_mean_latency_ms']:.3f} ms, K/V {a['kv_dtype']}")
    print(f"ceilings: copy {ceilings['copy_GBps']:.0f} GB/s, bf16 matmul "
          f"{ceilings['matmul_n']}^3 {ceilings['matmul_TFLOPs']:.0f} TFLOP/s")


def main():
    args = parse_args()
    with common.launch_overrides(args.launch_overrides):
        run(args)


def run(args):
    common.check_device(args.device)
    quick, cpu = args.quick, args.device == "cpu"
    if args.flex_budget is None:
        args.flex_budget = 60.0 if quick else 120.0
    if args.baseline_budget is None:
        args.baseline_budget = 8.0 if quick else 20.0
    if cpu:
        # Tiny: every code path, no meaningful number.
        args.reps = min(args.reps, 3)
        heads, sizes, shrink = (8, 2, 4), [1024], 64
        union_seqlen = args.union_seqlen or 2048
    else:
        heads, shrink = (64, 4, 16), 1
        sizes = [8192, 32768] if quick else [8192, 32768, 131072]
        union_seqlen = args.union_seqlen or 32768
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    patterns = args.patterns.split(",")
    impls = [i for i in args.impls.split(",") if i]
    prod_impls = (args.production_impls.split(",") if args.production_impls else
                  ["msa", "sdpa_cudnn"] if quick else ["msa", "sdpa_cudnn", "gather"])
    if cpu:
        # The CPU has no cuDNN / flash SDPA; one default-backend SDPA row checks that path.
        impls = [i for i in impls if i != "sdpa_flash"]
        prod_impls = [i for i in prod_impls if i != "sdpa_flash"]

    flashmsa = common.import_flashmsa()
    import flashmsa.patterns  # noqa: F401 - make_q2k
    import flashmsa.reference  # noqa: F401 - keys_read, evaluate_rows
    env = common.environment(args.device)
    print(f"prefill bench: {env}", flush=True)
    print(f"K/V: msa {common.dtype_name(common.kv_storage_dtype(args.kv_dtype, Q_DTYPE))}, "
          f"baselines {BASELINE_KV}; q {common.dtype_name(Q_DTYPE)}", flush=True)
    ceilings = common.measure_ceilings(args.device, args.reps)
    print(f"ceilings: {ceilings}", flush=True)

    runner = Runner(args, flashmsa)
    union_rows = union_table(flashmsa, union_seqlen, patterns, heads, args.device, args.seed)

    def save():
        # After every case: a run stopped by its time limit still leaves what it measured.
        common.write_outputs(args.out, "prefill", runner.rows,
                             {"environment": env, "ceilings": ceilings, "union_stats": union_rows,
                              "production_aggregate": aggregates(runner.rows), "heads": heads,
                              "kv_dtype": {"msa": runner.msa_kv, "baselines": BASELINE_KV},
                              "flex_skipped": runner.flex_skip_reason})

    cases = [(c, impls) for c in m3_cases(sorted(sizes), patterns, heads)]
    if args.production == "on":
        # The CPU tiny mode checks the code path on three cases; the GPU runs all of them.
        cases += [(c, prod_impls) for c in production_cases(heads, shrink)[:3 if cpu else None]]
    for seed, (case, case_impls) in enumerate(cases, start=args.seed + 1):
        runner.run_case(case, case_impls, seed)
        save()
    plot(runner.rows, f"{args.out}/prefill.png", heads)
    aggs = aggregates(runner.rows)
    summary(runner.rows, ceilings, union_rows, aggs)


if __name__ == "__main__":
    main()
