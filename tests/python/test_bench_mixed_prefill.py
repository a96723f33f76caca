"""bench/mixed_prefill.py: its mixes have the shapes the issue names (chunked-prefill batches of
up to 18 requests, 1-16384 query tokens each, 1K-200K keys), and its CPU mode runs every family
through the CPU backend with the sampled reference check passing, so the GPU run's code paths
are exercised in CI."""
import json
import os
import subprocess
import sys

import pytest

from flashmsa import _lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from bench import mixed_prefill  # noqa: E402


@pytest.mark.parametrize("family", mixed_prefill.FAMILIES)
def test_mixes_have_chunked_prefill_shapes(family):
    for index in range(25):
        mix = mixed_prefill.draw_mix(family, index, seed=0)
        name = f"[mixed_prefill {mix.name}]"
        assert 2 <= len(mix.q_lens) <= mixed_prefill.MAX_REQUESTS, f"{name} {len(mix.q_lens)}"
        assert all(1 <= q <= mixed_prefill.MAX_CHUNK for q in mix.q_lens), f"{name} {mix.q_lens}"
        assert all(p >= 0 for p in mix.prefix_lens), f"{name} {mix.prefix_lens}"
        assert all(k <= mixed_prefill.MAX_KEYS for k in mix.kv_lens), f"{name} {mix.kv_lens}"
        assert all(k >= min(mixed_prefill.MIN_KEYS, q) for q, k in zip(mix.q_lens, mix.kv_lens)), (
            f"{name} {mix.kv_lens}")
        single = mix.single()
        assert single.q_lens == [sum(mix.q_lens)], f"{name} single {single.q_lens}"
        assert min(mix.prefix_lens) <= single.prefix_lens[0] <= max(mix.prefix_lens), (
            f"{name} single prefix {single.prefix_lens} outside {mix.prefix_lens}")
    again = mixed_prefill.draw_mix(family, 3, seed=0)
    assert again == mixed_prefill.draw_mix(family, 3, seed=0), f"[{family}] not reproducible"
    assert again != mixed_prefill.draw_mix(family, 3, seed=1), f"[{family}] seed ignored"


def test_mixed_prefill_bench_runs_on_cpu(tmp_path):
    env = dict(os.environ, FLASHMSA_LIBRARY=_lib.library_path(), PYTHONPATH=os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-m", "bench.mixed_prefill", "--device", "cpu",
                           "--out", str(tmp_path)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (f"[bench.mixed_prefill cpu] exit {done.returncode}: "
                                  f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    with open(tmp_path / "mixed_prefill.json") as f:
        rows = json.load(f)["rows"]
    families = {r["mix"].split("_")[0] for r in rows}
    assert len(rows) == 4 and families == {"spread", "one", "many", "even"}, (
        f"[bench.mixed_prefill cpu] rows {[r['mix'] for r in rows]}")
    for r in rows:
        name = f"[bench.mixed_prefill cpu] {r['mix']}"
        assert r["note"] == "", f"{name}: {r['note']}"
        assert r["mix_gflop"] > 0 and r["single_gflop"] > 0, f"{name}: no useful work"
        assert r["mix_ms"] > 0 and r["single_ms"] > 0, f"{name}: no timing"


def test_summary_aggregates_useful_tflops():
    # 300 GFLOP in 2 ms and 100 GFLOP in 1 ms: 400 GFLOP in 3 ms is 133.3 TFLOP/s (GFLOP per ms
    # is TFLOP/s); the single requests' 400 GFLOP in 4 ms is 100.
    rows = [dict(mix="a", mix_gflop=300.0, mix_ms=2.0, single_gflop=300.0, single_ms=3.0,
                 ratio=1.5, meets=True),
            dict(mix="b", mix_gflop=100.0, mix_ms=1.0, single_gflop=100.0, single_ms=1.0,
                 ratio=1.0, meets=True),
            dict(mix="untimed")]
    s = mixed_prefill.summary(rows)
    assert s["timed"] == 2 and s["mixes"] == 3, s
    assert s["mix_tflops"] == pytest.approx(400.0 / 3.0), s
    assert s["single_tflops"] == pytest.approx(100.0), s
    assert s["ratio"] == pytest.approx(4.0 / 3.0), s
    assert (s["worst_mix"], s["meeting"]) == ("b", 2), s
