"""Device timeline of the sm90 kernels' phases for a few decode shapes, from a diagnostic build
(src/sm90/timeline.cuh). Build here, run on the GPU machine:

    cmake -S . -B build-timeline -DFLASHMSA_BUILD_TESTS=OFF -DFLASHMSA_TIMELINE=ON \\
        -DCMAKE_BUILD_TYPE=Release && cmake --build build-timeline -j2
    FLASHMSA_LIBRARY=build-timeline/libflashmsa.so PYTHONPATH=python python3 scripts/timeline.py

The kernels record each CTA's marks in a ring of the last 8 calls, in absolute %globaltimer ns;
this script reads the ring back through the library's flashmsa_timeline_ring_* functions.

Eager (the default): each case runs four times, synchronised after each call (the last is the
warm one), and the last call is summarised: each phase's end in microseconds from the CTA's
entry (min / median / max over the CTAs that reached it), the spread of the CTAs' entries, and
the slowest CTAs in full (`--all` prints every CTA). It also gives the SM clock the CTAs ran at
and, where two CTAs shared an SM, how alike the two's loop ends were (a correlation near 1: the
SM's place decides its bandwidth share; near 0: the CTAs' own luck does), with the SMs whose
CTAs finished their loops last and first.

`--graph` times the calls as the benchmark does: GRAPH_CALLS calls, each on its own input set,
captured in one CUDA graph and replayed twice. It prints each call's phases on one clock, from
the first call's first entry, and between consecutive calls the hand-over: when the next call's
CTAs entered and passed their grid wait, against this call's last CTA end (the programmatic
launch's overlap, which an eager timeline does not have).
"""
import ctypes
import os
import re
import sys

# (batch, query tokens per request, KV length), M3 heads. TIMELINE_CASES="1x1,16x1,8x8x100000"
# runs only those (kernel_smoke.cases_from_env).
CASES = ((1, 1, 32768), (16, 1, 32768), (64, 1, 32768), (128, 1, 32768), (32, 8, 32768))
GRAPH_CASES = ((1, 1, 32768), (16, 1, 32768))
CALLS = 4
GRAPH_CALLS = 4  # calls per graph; two replays fill the ring
RING_CALLS, RING_CTAS = 8, 512  # kRingCalls, kTimelineCtas (sm90/timeline.cuh)
# The translation units whose kernels record (each has its own ring): the one-token decode
# kernel and the prefill kernels (multi-token prediction's two-consumer tiles), bf16.
RING_UNITS = ("decode_bf16", "prefill_bf16")

# Summary names of the marks (sm90/timeline.cuh's TimelineMark), in the order they are shown.
PHASES = (("waited", "kMarkWaited"), ("located", "kMarkLocated"),
          ("page_row", "kMarkPageRowShared"), ("speculated", "kMarkSpeculated"), ("entries", "kMarkEntriesRead"),
          ("negatives", "kMarkNegativesCut"), ("candidates", "kMarkCandidates"),
          ("deduplicated", "kMarkSorted"), ("compacted", "kMarkCompacted"),
          ("planned", "kMarkPlanned"), ("released", "kMarkProducerReleased"),
          ("k_issued", "kMarkFirstKIssued"), ("issued", "kMarkFirstIssued"),
          ("q", "kMarkQueriesLoaded"), ("first_k", "kMarkFirstK"),
          ("scores", "kMarkFirstScores"), ("softmax", "kMarkFirstSoftmax"),
          ("first_v", "kMarkFirstV"), ("last_k", "kMarkLastK"), ("loop", "kMarkLoopDone"),
          ("published", "kMarkPublished"), ("cluster_ready", "kMarkClusterReady"),
          ("pushed", "kMarkPushed"), ("owners_ready", "kMarkOwnersReady"),
          ("joined", "kMarkClusterJoined"), ("lse_combined", "kMarkLseCombined"),
          ("reduced", "kMarkReduced"), ("end", "end"), ("exit", "exit"))


def mark_names():
    """The TimelineMark enum of sm90/timeline.cuh, in order: the ring's first fields."""
    source = os.path.join(os.path.dirname(__file__), "..", "src", "sm90", "timeline.cuh")
    body = re.search(r"enum TimelineMark \{(.*?)\};", open(source).read(), re.S).group(1)
    names = [n.strip() for n in re.sub(r"//[^\n]*", "", body).split(",") if n.strip()]
    assert names[-1] == "kNumMarks", names
    return names[:-1]


class Rings:
    """The library's timeline rings (one per recording translation unit)."""

    def __init__(self):
        library = ctypes.CDLL(os.environ["FLASHMSA_LIBRARY"])
        self.controls = []
        for unit in RING_UNITS:
            control = getattr(library, f"flashmsa_timeline_ring_{unit}")
            control.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
            self.controls.append(control)
        self.fields = mark_names() + ["sm", "mhz", "end", "exit"]

    def reset(self):
        for control in self.controls:
            assert control(None, None, 1) == 0, "timeline ring reset failed"

    def calls(self, count):
        """The last `count` calls recorded since the reset, oldest first: per call, one dict per
        CTA (the fields in absolute ns, `cta`), from the unit whose kernels ran."""
        width = len(self.fields)
        for control in self.controls:
            ring = (ctypes.c_uint64 * (RING_CALLS * RING_CTAS * width))()
            recorded = (ctypes.c_uint32 * RING_CTAS)()
            assert control(ring, recorded, 0) == 0, "timeline ring read failed"
            ctas = sum(1 for c in recorded if c > 0)
            if ctas == 0:
                continue
            total = recorded[0]
            assert all(recorded[i] == total for i in range(ctas)), \
                f"every CTA index must have recorded {total} calls: {list(recorded[:ctas])}"
            assert count <= min(total, RING_CALLS), f"{count} calls asked, {total} recorded"
            result = []
            for call in range(total - count, total):
                slot = call % RING_CALLS
                rows = []
                for cta in range(ctas):
                    base = (slot * RING_CTAS + cta) * width
                    rows.append(dict(zip(self.fields, ring[base:base + width]), cta=cta))
                result.append(rows)
            return result
        raise AssertionError("no timeline ring recorded a call (is this a timeline build?)")


def runtime():
    """torch, flashmsa and kernel_smoke's case helpers, imported when a run needs them."""
    sys.path.insert(0, os.path.dirname(__file__))
    import torch
    import flashmsa
    import kernel_smoke
    return torch, flashmsa, kernel_smoke.cases_from_env, kernel_smoke.decode_case


def min_median_max(values):
    """The smallest, middle and largest of `values` (not empty)."""
    ordered = sorted(values)
    return ordered[0], ordered[len(ordered) // 2], ordered[-1]


def run_eager_cases(show_all):
    torch, flashmsa, cases_from_env, decode_case = runtime()
    rings = Rings()
    for batch, tokens, kv_len in cases_from_env("TIMELINE_CASES", CASES):
        args = decode_case(batch, tokens, kv_len)
        rings.reset()
        for _ in range(CALLS):
            flashmsa.msa_sparse_attention(**args)
            torch.cuda.synchronize()
        last = rings.calls(1)[0]
        summarise(f"b{batch} t{tokens} kv{kv_len} call {CALLS - 1}", last, show_all)


def summarise(case, rows, show_all=False):
    """One eager call: each phase in us from each CTA's own entry."""
    first_entry = min(r["kMarkEntry"] for r in rows)
    print(f"{case}: {len(rows)} CTAs, entries spread over "
          f"{(max(r['kMarkEntry'] for r in rows) - first_entry) / 1000:.1f} us")

    def since_entry(r, key):
        return (r[key] - r["kMarkEntry"]) / 1000 if r[key] > 0 else None

    for label, key in PHASES:
        values = [v for v in (since_entry(r, key) for r in rows) if v is not None]
        if values:
            low, middle, high = min_median_max(values)
            print(f"  {label:13s} min {low:7.1f}  median {middle:7.1f}  max {high:7.1f}  "
                  f"({len(values)} CTAs)")
    clocks = [r["mhz"] for r in rows if r["mhz"] > 0]
    if clocks:
        print("  SM clock      min {} median {} max {} MHz".format(*min_median_max(clocks)))
    summarise_sms(rows)
    by_finish = sorted(rows, key=lambda r: r["end"], reverse=True)
    for r in (rows if show_all else by_finish[:3]):
        start = (r["kMarkEntry"] - first_entry) / 1000
        phases = "  ".join(f"{label} {since_entry(r, key):.1f}" for label, key in PHASES
                           if r[key] > 0)
        print(f"  cta {r['cta']:4d} entered at {start:5.1f}: {phases}")


def summarise_sms(rows):
    """Loop ends of the CTAs that shared an SM: their correlation, and the slowest/fastest SMs."""
    by_sm = {}
    for r in rows:
        if r["kMarkLoopDone"] > 0:
            loop = (r["kMarkLoopDone"] - r["kMarkEntry"]) / 1000
            by_sm.setdefault(r["sm"], []).append((r["kMarkEntry"], loop))
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


def run_graph_cases():
    """Each case's GRAPH_CALLS calls in one graph, replayed until the ring is full."""
    torch, flashmsa, cases_from_env, decode_case = runtime()
    rings = Rings()
    for batch, tokens, kv_len in cases_from_env("TIMELINE_CASES", GRAPH_CASES):
        sets = [decode_case(batch, tokens, kv_len, seed=s) for s in range(GRAPH_CALLS)]
        for args in sets:  # configures the kernels and warms them, as the benchmark does
            flashmsa.msa_sparse_attention(**args)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for args in sets:
                flashmsa.msa_sparse_attention(**args)
        graph.replay()
        torch.cuda.synchronize()
        rings.reset()
        for _ in range(RING_CALLS // GRAPH_CALLS):
            graph.replay()
        torch.cuda.synchronize()
        summarise_graph(f"b{batch} t{tokens} kv{kv_len}", rings.calls(RING_CALLS))


def summarise_graph(case, calls):
    """Per call, each phase's min / median / max in us from the first call's first entry; then
    the hand-over between consecutive calls."""
    origin = min(r["kMarkEntry"] for r in calls[0])
    shown = (("entry", "kMarkEntry"), ("waited", "kMarkWaited"), ("located", "kMarkLocated"),
             ("k_issued", "kMarkFirstKIssued"), ("first_k", "kMarkFirstK"),
             ("loop", "kMarkLoopDone"), ("end", "end"), ("exit", "exit"))

    def us_after(rows, key, zero):
        """`key`'s time in us after `zero` (ns) for each CTA that reached it."""
        return [(r[key] - zero) / 1000 for r in rows if r[key] > 0]

    def spread(rows, key):
        values = us_after(rows, key, origin)
        return "/".join(f"{v:.2f}" for v in min_median_max(values)) if values else "-"

    print(f"{case}: {len(calls[0])} CTAs a call, {len(calls)} calls ({GRAPH_CALLS} a graph); "
          "us from call 0's first entry, min/median/max over the CTAs")
    for c, rows in enumerate(calls):
        print(f"  call {c}: " + "  ".join(f"{label} {spread(rows, key)}" for label, key in shown))
    # Every phase the kernel marked, as the median CTA's time after the call's first grid wait:
    # the start and the reduction in the replayed call, where the eager timeline runs cold.
    print("  every phase, median us after the call's first grid wait:")
    for c, rows in enumerate(calls):
        first_wait = min(r["kMarkWaited"] for r in rows if r["kMarkWaited"] > 0)
        medians = []
        for label, key in PHASES:
            values = us_after(rows, key, first_wait)
            if values:
                medians.append(f"{label} {min_median_max(values)[1]:.2f}")
        print(f"    call {c}: " + "  ".join(medians))
    print("  hand-over (the next call's first entry, and its first and last grid wait passed, "
          "against this call's last CTA exit; us):")
    for c in range(len(calls) - 1):
        last_end = max(r["exit"] for r in calls[c])
        following = calls[c + 1]
        first_entry = min(r["kMarkEntry"] for r in following)
        waited = sorted(r["kMarkWaited"] for r in following if r["kMarkWaited"] > 0)
        period = (max(r["exit"] for r in following) - last_end) / 1000
        where = "same replay" if (c + 1) % GRAPH_CALLS else "next replay"
        passed = (f"{(waited[0] - last_end) / 1000:+.2f} / {(waited[-1] - last_end) / 1000:+.2f}"
                  if waited else "-")
        print(f"    call {c} -> {c + 1} ({where}): entry {(first_entry - last_end) / 1000:+.2f}  "
              f"waited {passed}  period (last exit to last exit) {period:.2f}")


def main():
    if "--graph" in sys.argv[1:]:
        run_graph_cases()
    else:
        run_eager_cases(show_all="--all" in sys.argv[1:])


if __name__ == "__main__":
    main()
