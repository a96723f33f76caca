"""Chunked-prefill batches of mixed lengths against one request of the same total tokens: the
issue's target is a batch at least as fast per useful FLOP as the single request.

A mix is what a serving engine's chunked prefill hands the kernel in one call: up to 18
requests, each a chunk of 1 to 16384 query tokens on a cached prefix, its keys (prefix plus
chunk) 1K to 200K. The mixes are drawn from a seeded generator (so every run times the same
ones) in four families:
  - `spread`:  2-18 requests, query and key lengths log-uniform over the whole range;
  - `one_big`: one long chunk (4K-16K tokens) beside 1-17 short ones (1-512 tokens), the shape
               a scheduler makes when it tops up a long prefill with other requests' chunks;
  - `many_small`: 8-18 chunks of 1-1024 tokens on long prefixes (32K-200K keys);
  - `even`:    2-8 chunks of one length (1K-8K tokens) on prefixes of different lengths.
Each mix's reference is one request of the mix's total query tokens T on a prefix of the
query-weighted mean of the mix's prefixes (keys = that prefix + T), with the same heads,
topk and selection pattern.

Both calls read a paged bf16 cache (or fp8 with --kv-dtype fp8, per-tensor scales) through
flashmsa.msa_sparse_attention with MiniMax-M3's heads (Hq 64, Hkv 4, D 128, topk 16), causal,
q_offset = the prefixes, the `indexer` pattern of flashmsa.patterns (or --pattern). They are
timed as CUDA-graph replays in alternating rounds (bench.vllm_entry's timing), useful FLOPs as
the contract's section 10 counts them (flashmsa.reference.keys_read), and the mix's output is
checked against flashmsa.reference on sampled rows. The table gives both useful TFLOP/s and
their ratio (target: at least 1.00); the summary the ratio of the sums (total useful FLOPs over
total time, mixes and references each).

--device cpu runs tiny mixes of the same families through the CPU backend: it checks the code
paths; its timings are not judged.

    python3 -m bench.mixed_prefill --out out/bench [--quick] [--device cpu] [--mixes N]
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from . import common
from .common import HEAD_DIM
from .vllm_entry import GPU_HEADS, CPU_HEADS, Meta, PackedCache, Q_DTYPE, time_pair

TARGET = 1.0                  # mix useful TFLOP/s over the single request's
MAX_REQUESTS = 18
MAX_CHUNK = 16384
MIN_KEYS, MAX_KEYS = 1024, 200_000
FAMILIES = ("spread", "one_big", "many_small", "even")


@dataclass
class Mix:
    name: str
    q_lens: list
    prefix_lens: list

    @property
    def kv_lens(self):
        return [q + p for q, p in zip(self.q_lens, self.prefix_lens)]

    def single(self) -> Mix:
        """One request of the mix's total query tokens on its query-weighted mean prefix."""
        total = sum(self.q_lens)
        prefix = round(sum(q * p for q, p in zip(self.q_lens, self.prefix_lens)) / total)
        return Mix(f"{self.name}/single", [total], [prefix])


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _request(rng, q_lo, q_hi, keys_lo, keys_hi, scale):
    """(query tokens, prefix) with the keys in [keys_lo, keys_hi] (both divided by scale)."""
    q = max(1, _log_uniform(rng, q_lo, q_hi) // scale)
    keys = max(q, _log_uniform(rng, max(keys_lo, 1), keys_hi) // scale)
    return q, keys - q


def draw_mix(family: str, index: int, seed: int, scale: int = 1) -> Mix:
    """Mix `index` of `family`; scale > 1 divides every length (the CPU mode's tiny mixes)."""
    rng = random.Random(f"{seed}:{family}:{index}")
    if family == "spread":
        reqs = [_request(rng, 1, MAX_CHUNK, MIN_KEYS, MAX_KEYS, scale)
                for _ in range(rng.randint(2, MAX_REQUESTS))]
    elif family == "one_big":
        reqs = [_request(rng, 4096, MAX_CHUNK, 16384, MAX_KEYS, scale)]
        reqs += [_request(rng, 1, 512, MIN_KEYS, MAX_KEYS, scale)
                 for _ in range(rng.randint(1, MAX_REQUESTS - 1))]
    elif family == "many_small":
        reqs = [_request(rng, 1, 1024, 32768, MAX_KEYS, scale)
                for _ in range(rng.randint(8, MAX_REQUESTS))]
    elif family == "even":
        q = max(1, _log_uniform(rng, 1024, 8192) // scale)
        reqs = [(q, max(0, _log_uniform(rng, MIN_KEYS, MAX_KEYS) // scale - q))
                for _ in range(rng.randint(2, 8))]
    else:
        raise ValueError(f"unknown family {family!r}")
    rng.shuffle(reqs)
    return Mix(f"{family}_{index}", [q for q, _ in reqs], [p for _, p in reqs])


def draw_mixes(count: int, seed: int, scale: int = 1) -> list:
    """count mixes, the families taking turns."""
    return [draw_mix(FAMILIES[i % len(FAMILIES)], i // len(FAMILIES), seed, scale)
            for i in range(count)]


# ---------------------------------------------------------------------------------------------
# One call


def make_call(flashmsa, mix: Mix, cache: PackedCache, heads, pattern: str, device: str,
              seed: int) -> dict:
    """The call's arguments (bench.vllm_entry's paged packed cache, its own page table)."""
    hq, hkv, topk = heads
    table = cache.page_tables(mix.kv_lens, 1, device)[0]
    q2k = flashmsa.patterns.make_q2k(pattern, mix.q_lens, mix.kv_lens, hkv, topk, causal=True,
                                     q_offsets=mix.prefix_lens, seed=seed, device=device)
    meta = Meta(common.cu_seqlens(mix.q_lens, device),
                torch.tensor(mix.kv_lens, dtype=torch.int32, device=device),
                torch.tensor(mix.prefix_lens, dtype=torch.int32, device=device))
    q = common.randn((sum(mix.q_lens), hq, HEAD_DIM), Q_DTYPE, device)
    return dict(q=q, k=cache.msa_k, v=cache.msa_v, q2k_indices=q2k, cu_seqlens_q=meta.cu_q,
                causal=True, softmax_scale=HEAD_DIM ** -0.5, page_table=table,
                seqused_k=meta.seq_lens, q_offset=meta.prefix_lens,
                **cache.reference_scale_arguments())


def useful_flops(flashmsa, call: dict, heads) -> float:
    hq, hkv, _ = heads
    keys = flashmsa.reference.keys_read(
        call["q2k_indices"], call["cu_seqlens_q"], causal=True, page_table=call["page_table"],
        seqused_k=call["seqused_k"], q_offset=call["q_offset"])
    return 4.0 * HEAD_DIM * (hq // hkv) * float(keys.sum())


def run_mix(flashmsa, mix: Mix, cache: PackedCache, heads, args, rounds: int, seed: int) -> dict:
    calls = {"mix": make_call(flashmsa, mix, cache, heads, args.pattern, args.device, seed),
             "single": make_call(flashmsa, mix.single(), cache, heads, args.pattern, args.device,
                                 seed + 1)}
    outs = {n: torch.full_like(c["q"], float("nan")) for n, c in calls.items()}
    for n, c in calls.items():
        flashmsa.msa_sparse_attention(**c, out=outs[n])
    rel = common.sampled_error(flashmsa, outs["mix"], calls["mix"])
    finite = all(bool(torch.isfinite(o).all()) for o in outs.values())
    fns = {n: [lambda c=c, o=outs[n]: flashmsa.msa_sparse_attention(**c, out=o)]
           for n, c in calls.items()}
    timed = time_pair(fns, args, rounds)
    row = {"mix": mix.name, "requests": len(mix.q_lens), "q_tokens": sum(mix.q_lens),
           "q_max": max(mix.q_lens), "kv_max": max(mix.kv_lens),
           "single_kv": mix.single().kv_lens[0], "rel_l2": rel}
    for n, c in calls.items():
        t = timed[n][0]
        flops = useful_flops(flashmsa, c, heads)
        row[f"{n}_ms"] = t.seconds * 1e3
        row[f"{n}_gflop"] = flops / 1e9
        row[f"{n}_tflops"] = flops / t.seconds / 1e12
    row["ratio"] = row["mix_tflops"] / row["single_tflops"]
    row["meets"] = (row["ratio"] >= TARGET) if args.device == "cuda" else None
    notes = [n for n in (common.check_note(rel), "" if finite else "NON-FINITE OUTPUT") if n]
    row["note"] = "; ".join(notes)
    return row


# ---------------------------------------------------------------------------------------------
# Driver


def parse_args(argv=None):
    p = common.base_parser(__doc__.splitlines()[0])
    p.add_argument("--mixes", type=int, default=None,
                   help="mixes to draw (default 16, quick 8, cpu 4)")
    p.add_argument("--pattern", default="indexer", choices=("random", "clustered", "indexer"))
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 2)")
    return p.parse_args(argv)


def summary(rows: list) -> dict:
    timed = [r for r in rows if "ratio" in r]
    if not timed:
        return {"mixes": len(rows), "timed": 0}
    mix = sum(r["mix_gflop"] for r in timed) / sum(r["mix_ms"] for r in timed)
    single = sum(r["single_gflop"] for r in timed) / sum(r["single_ms"] for r in timed)
    worst = min(timed, key=lambda r: r["ratio"])
    return {"mixes": len(rows), "timed": len(timed), "mix_tflops": mix, "single_tflops": single,
            "ratio": mix / single, "worst_ratio": worst["ratio"], "worst_mix": worst["mix"],
            "meeting": sum(bool(r["meets"]) for r in timed)}


def run(args) -> list:
    common.check_device(args.device)
    cpu = args.device == "cpu"
    heads = CPU_HEADS if cpu else GPU_HEADS
    if cpu:
        args.reps = min(args.reps, 3)
        torch.set_num_threads(1)
    count = args.mixes or (4 if cpu else (8 if args.quick else 16))
    rounds = max(1, args.rounds or 2)
    mixes = draw_mixes(count, args.seed, scale=200 if cpu else 1)
    flashmsa = common.import_flashmsa()
    import flashmsa.patterns  # noqa: F401 - make_q2k
    import flashmsa.reference  # noqa: F401 - keys_read, evaluate_rows
    kv_dtype = common.kv_storage_dtype(args.kv_dtype, Q_DTYPE)
    env = common.environment(args.device)
    print(f"mixed prefill bench: {env}", flush=True)
    # One cache for all mixes: each call's pages, mix and reference, are disjoint within it.
    pages = max(sum(math.ceil(k / 128) for k in m.kv_lens) + math.ceil(m.single().kv_lens[0] / 128)
                for m in mixes)
    bf16 = PackedCache(pages, heads[1], args.device, Q_DTYPE)
    cache = bf16 if kv_dtype == Q_DTYPE else PackedCache(pages, heads[1], args.device, kv_dtype,
                                                         source=bf16)
    del bf16
    common.free_memory(args.device)
    print(f"paged cache: {pages} blocks {cache.label}; heads {heads}; pattern {args.pattern}; "
          f"{rounds} rounds of {args.reps} reps", flush=True)
    rows = []
    for i, mix in enumerate(mixes):
        try:
            row = run_mix(flashmsa, mix, cache, heads, args, rounds, args.seed + 1000 * i)
        except Exception as e:  # noqa: BLE001 - one failing mix must not end the run
            row = {"mix": mix.name, "requests": len(mix.q_lens), "note": f"error: {e}"[:300]}
        row["kv_dtype"] = cache.label
        rows.append(row)
        if "ratio" in row:
            print(f"  {row['mix']:14s} {row['requests']:2d} req {row['q_tokens']:6d} tok  mix "
                  f"{row['mix_tflops']:7.1f}  single {row['single_tflops']:7.1f} TFLOP/s  "
                  f"ratio {row['ratio']:.3f}" + (f"  {row['note']}" if row["note"] else ""),
                  flush=True)
        else:
            print(f"  {row['mix']:14s} {row['note']}", flush=True)
        common.write_outputs(args.out, "mixed_prefill", rows,
                             {"environment": env, "heads": heads, "summary": summary(rows)})
    common.print_table(rows, [("mix", "mix", "{}"), ("requests", "req", "{}"),
                              ("q_tokens", "q tokens", "{}"), ("q_max", "q max", "{}"),
                              ("kv_max", "kv max", "{}"), ("single_kv", "single kv", "{}"),
                              ("mix_ms", "mix ms", "{:.3f}"), ("mix_tflops", "mix TF/s", "{:.1f}"),
                              ("single_ms", "single ms", "{:.3f}"),
                              ("single_tflops", "single TF/s", "{:.1f}"),
                              ("ratio", "ratio", "{:.3f}"), ("meets", ">=1", "{}"),
                              ("note", "note", "{}")],
                       "mixed chunked-prefill batches against one request of the same tokens ("
                       + ("CPU wall clock: not judged)" if cpu else "CUDA-graph replays)"))
    s = summary(rows)
    if s["timed"]:
        print(f"aggregate: mixes {s['mix_tflops']:.1f} useful TFLOP/s, single requests "
              f"{s['single_tflops']:.1f}, ratio {s['ratio']:.3f}; worst {s['worst_ratio']:.3f} "
              f"({s['worst_mix']})" + ("" if cpu else f"; {s['meeting']} of {s['timed']} mixes "
                                       "at least as fast per useful FLOP"))
    return rows


def failures(rows: list) -> list:
    return [f"{r['mix']}: {r['note']}" for r in rows
            if "ratio" not in r or "FAILED" in r["note"] or "NON-FINITE" in r["note"]]


def main():
    common.run_checked(parse_args(), run, failures)


if __name__ == "__main__":
    main()
