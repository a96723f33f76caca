"""Device timeline of the sm90 kernel's phases for a few decode shapes, from a diagnostic build
(src/sm90/timeline.cuh). Build here, run on the GPU machine:

    cmake -S . -B build-timeline -DFLASHMSA_BUILD_TESTS=OFF -DFLASHMSA_TIMELINE=ON \\
        -DCMAKE_BUILD_TYPE=Release && cmake --build build-timeline -j2
    FLASHMSA_LIBRARY=build-timeline/libflashmsa.so PYTHONPATH=python python3 scripts/timeline.py

Each case runs eagerly four times (the last is the warm one); the kernel prints one `TL` line per
CTA, which this script summarises for the last call: each phase's end in microseconds from the
CTA's entry (min / median / max over the CTAs that reached it), the spread of the CTAs' entries,
and the slowest CTAs in full (`--all` prints every CTA). It also gives the SM clock the CTAs ran
at and, where two CTAs shared an SM, how alike the two's loop ends were (a correlation near 1:
the SM's place decides its bandwidth share; near 0: the CTAs' own luck does), with the SMs whose
CTAs finished their loops last and first.

`--graph` times the calls as the benchmark does instead: GRAPH_CALLS calls, each on its own
input set, captured in one CUDA graph and replayed twice, with the bf16 decode kernels writing
their marks into a ring in absolute %globaltimer ns (no printf, which would delay each CTA's
exit and so the next call). It prints each call's phases on one clock from the first call's
first entry, and between consecutive calls: when the next call's CTAs entered and passed
their grid wait against this call's last CTA end (the programmatic launch's overlap).
"""
import ctypes
import os
import re
import subprocess
import sys

# (batch, query tokens per request, KV length), M3 heads. TIMELINE_CASES="1x1,16x1,8x8x100000"
# runs only those (kernel_smoke.cases_from_env), e.g. under a launch override that would make
# the other cases' output huge.
CASES = ((1, 1, 32768), (16, 1, 32768), (64, 1, 32768), (128, 1, 32768), (32, 8, 32768))
CALLS = 4


def run_cases():
    sys.path.insert(0, os.path.dirname(__file__))
    import torch
    import flashmsa
    from kernel_smoke import cases_from_env, decode_case
    for batch, tokens, kv_len in cases_from_env("TIMELINE_CASES", CASES):
        args = decode_case(batch, tokens, kv_len)
        for call in range(CALLS):
            print(f"=== b{batch} t{tokens} kv{kv_len} call {call}", flush=True)
            flashmsa.msa_sparse_attention(**args)
            torch.cuda.synchronize()


PHASES = ("waited", "located", "speculated", "entries", "negatives", "candidates", "deduplicated",
          "compacted", "planned", "released", "k_issued", "issued", "q", "first_k", "scores",
          "softmax", "first_v", "last_k", "loop", "published", "cluster_ready", "pushed",
          "owners_ready", "joined", "lse_combined", "reduced", "end")


def parse(lines):
    """{case: [per-CTA dict]} for the last call of each case; phases in us, 0 = not reached."""
    cases, case = {}, None
    for line in lines:
        if line.startswith("==="):
            case = line[4:].strip()
        elif line.startswith("TL ") and case and case.endswith(f"call {CALLS - 1}"):
            fields = line.split()[1:]
            row = {name: int(value) for name, value in zip(fields[0::2], fields[1::2])}
            cases.setdefault(case, []).append(row)
    return cases


def summarise(case, rows, show_all=False):
    first_entry = min(r["entry_abs"] for r in rows)
    print(f"{case}: {len(rows)} CTAs, entries spread over "
          f"{(max(r['entry_abs'] for r in rows) - first_entry) / 1000:.1f} us")
    for phase in PHASES:
        values = sorted(r[phase] / 1000 for r in rows if r.get(phase, 0) > 0)
        if values:
            print(f"  {phase:13s} min {values[0]:7.1f}  median {values[len(values) // 2]:7.1f}  "
                  f"max {values[-1]:7.1f}  ({len(values)} CTAs)")
    clocks = sorted(r["mhz"] for r in rows if r.get("mhz", 0) > 0)
    if clocks:
        print(f"  SM clock      min {clocks[0]} median {clocks[len(clocks) // 2]} max {clocks[-1]} MHz")
    summarise_sms(rows)
    by_finish = sorted(rows, key=lambda r: r["entry_abs"] + r["end"], reverse=True)
    for r in (rows if show_all else by_finish[:3]):
        start = (r["entry_abs"] - first_entry) / 1000
        phases = "  ".join(f"{p} {r[p] / 1000:.1f}" for p in PHASES if r.get(p, 0) > 0)
        print(f"  cta {r['cta']:4d} entered at {start:5.1f}: {phases}")


def summarise_sms(rows):
    """Loop ends of the CTAs that shared an SM: their correlation, and the slowest/fastest SMs."""
    by_sm = {}
    for r in rows:
        if "sm" in r and r.get("loop", 0) > 0:
            by_sm.setdefault(r["sm"], []).append((r["entry_abs"], r["loop"] / 1000))
    pairs = [sorted(v) for v in by_sm.values() if len(v) == 2]
    if len(pairs) < 8:
        return
    xs = [p[0][1] for p in pairs]
    ys = [p[1][1] for p in pairs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    vx = sum((x - mx) ** 2 for x in xs) ** 0.5
    vy = sum((y - my) ** 2 for y in ys) ** 0.5
    corr = cov / (vx * vy) if vx > 0 and vy > 0 else 0.0
    print(f"  co-resident CTAs' loop ends: correlation {corr:.2f} over {len(pairs)} SMs")
    means = sorted((sum(t for _, t in v) / len(v), sm) for sm, v in by_sm.items())
    print("  SMs by mean loop end, last: " +
          " ".join(f"{sm}:{t:.1f}" for t, sm in reversed(means[-12:])))
    print("  SMs by mean loop end, first: " + " ".join(f"{sm}:{t:.1f}" for t, sm in means[:12]))


GRAPH_CALLS = 4  # calls per graph; two replays fill the ring's 8 slots (timeline.cuh)
GRAPH_CASES = ((1, 1, 32768), (16, 1, 32768))
RING_CALLS, RING_CTAS = 8, 512  # kRingCalls, kRingCtas (sm90/timeline.cuh)


def mark_names():
    """The TimelineMark enum of sm90/timeline.cuh, in order (the ring's fields)."""
    source = os.path.join(os.path.dirname(__file__), "..", "src", "sm90", "timeline.cuh")
    body = re.search(r"enum TimelineMark \{(.*?)\};", open(source).read(), re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    names = [n.strip() for n in body.split(",") if n.strip()]
    assert names[-1] == "kNumMarks", names
    return names[:-1]


def run_graph_cases():
    """Each case's GRAPH_CALLS calls in one graph, replayed twice, read back from the ring."""
    sys.path.insert(0, os.path.dirname(__file__))
    import torch
    import flashmsa
    from kernel_smoke import cases_from_env, decode_case
    ring_control = ctypes.CDLL(os.environ["FLASHMSA_LIBRARY"]).flashmsa_timeline_ring_decode_bf16
    ring_control.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    names = mark_names()
    fields = len(names) + 2  # the marks, the SM, the end
    for batch, tokens, kv_len in cases_from_env("TIMELINE_CASES", GRAPH_CASES):
        sets = [decode_case(batch, tokens, kv_len, seed=s) for s in range(GRAPH_CALLS)]
        assert ring_control(1, None, None) == 0, "ring mode"
        for args in sets:  # configure and warm, as the benchmark's own warm-up does
            flashmsa.msa_sparse_attention(**args)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for args in sets:
                flashmsa.msa_sparse_attention(**args)
        graph.replay()
        torch.cuda.synchronize()
        assert ring_control(1, None, None) == 0, "ring reset"
        for _ in range(RING_CALLS // GRAPH_CALLS):
            graph.replay()
        torch.cuda.synchronize()
        ring = (ctypes.c_uint64 * (RING_CALLS * RING_CTAS * fields))()
        calls = (ctypes.c_uint32 * RING_CTAS)()
        assert ring_control(0, ring, calls) == 0, "ring read"
        ctas = sum(1 for c in calls if c > 0)
        assert all(calls[i] == RING_CALLS for i in range(ctas)), \
            f"every CTA index must have recorded {RING_CALLS} calls: {list(calls[:ctas])}"
        rows = [[dict(zip(names + ["sm", "end"],
                          ring[(c * RING_CTAS + i) * fields:(c * RING_CTAS + i + 1) * fields]))
                 for i in range(ctas)] for c in range(RING_CALLS)]
        summarise_graph(f"b{batch} t{tokens} kv{kv_len}", rows)


def summarise_graph(case, calls):
    """Per call, each phase's min / median / max in us from the first call's first entry; then
    the hand-over between consecutive calls of a replay."""
    origin = min(r["kMarkEntry"] for r in calls[0])
    shown = (("entry", "kMarkEntry"), ("waited", "kMarkWaited"), ("located", "kMarkLocated"),
             ("k_issued", "kMarkFirstKIssued"), ("first_k", "kMarkFirstK"),
             ("loop", "kMarkLoopDone"), ("end", "end"))

    def spread(rows, key):
        values = sorted((r[key] - origin) / 1000 for r in rows if r[key] > 0)
        if not values:
            return "-"
        return f"{values[0]:.2f}/{values[len(values) // 2]:.2f}/{values[-1]:.2f}"

    print(f"{case}: {len(calls[0])} CTAs a call, {len(calls)} calls ({GRAPH_CALLS} a graph, "
          f"replayed {len(calls) // GRAPH_CALLS} times); us from call 0's first entry, "
          "min/median/max over the CTAs")
    for c, rows in enumerate(calls):
        print(f"  call {c}: " + "  ".join(f"{label} {spread(rows, key)}" for label, key in shown))
    print("  hand-over (the next call's first entry, and its first and last grid wait passed, "
          "against this call's last end; us):")
    for c in range(len(calls) - 1):
        last_end = max(r["end"] for r in calls[c])
        nxt = calls[c + 1]
        first_entry = min(r["kMarkEntry"] for r in nxt)
        waited = sorted(r["kMarkWaited"] for r in nxt if r["kMarkWaited"] > 0)
        same_graph = (c + 1) % GRAPH_CALLS != 0
        print(f"    call {c} -> {c + 1} ({'same replay' if same_graph else 'next replay'}): "
              f"entry {(first_entry - last_end) / 1000:+.2f}  waited "
              f"{(waited[0] - last_end) / 1000:+.2f} / {(waited[-1] - last_end) / 1000:+.2f}  "
              f"period (last end to last end) {(max(r['end'] for r in nxt) - last_end) / 1000:.2f}")


def main():
    if sys.argv[1:] == ["--graph"]:
        run_graph_cases()
        return
    if sys.argv[1:] == ["--run"]:
        run_cases()
        return
    # The kernel's printf output goes to the process's stdout: run the cases in a child.
    child = subprocess.run([sys.executable, __file__, "--run"], capture_output=True, text=True)
    sys.stderr.write(child.stderr[-2000:] if child.returncode else "")
    for case, rows in parse(child.stdout.splitlines()).items():
        summarise(case, rows, show_all="--all" in sys.argv[1:])
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
