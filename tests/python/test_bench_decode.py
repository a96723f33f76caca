"""bench/decode.py in its CPU mode (tiny shapes through the CPU backend): every row is timed and
checked against the fp64 evaluation, and the issue-4 rows carry their same-run baselines (dense
SDPA of equal work, gather-based PyTorch), so the GPU run's code paths are exercised in CI."""
import json
import os
import subprocess
import sys

from flashmsa import _lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_decode_bench_rows_and_baselines(tmp_path):
    # The bench puts the repository's python/ first on its path; the library is the one this
    # test's (installed) package uses.
    env = dict(os.environ, FLASHMSA_LIBRARY=_lib.library_path(), PYTHONPATH=os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-m", "bench.decode", "--device", "cpu", "--out",
                           str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"[bench.decode cpu] exit {done.returncode}: {done.stderr[-2000:]}"
    with open(tmp_path / "decode.json") as f:
        rows = json.load(f)["rows"]
    issue4 = [r for r in rows if r["suite"] == "issue4"]
    assert issue4 and len(rows) > len(issue4), "[bench.decode cpu] issue-4 and suite rows expected"
    for r in rows:
        assert r.get("GBps", 0) > 0, f"[bench.decode cpu] {r['case']}: no timing ({r.get('note')})"
        assert "CHECK FAILED" not in r["note"], f"[bench.decode cpu] {r['case']}: {r['note']}"
    for r in issue4:
        for impl in ("sdpa_cudnn", "sdpa_flash", "gather"):
            got = r.get(f"{impl}_GBps")
            assert got is not None and got > 0, (
                f"[bench.decode cpu] {r['case']}: baseline {impl} missing "
                f"({r.get('baseline_note')})")
