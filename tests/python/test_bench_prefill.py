"""bench/prefill.py in its CPU mode with NVFP4 K/V (--kv-dtype nvfp4): FlashMSA's rows read the
bf16 data quantized by quantize_nvfp4 (flat) with its swizzled block scales, are timed and pass
the sampled check against the fp64 evaluation of the NVFP4 call, and name nvfp4; the baselines
beside them stay bf16. Cut to one pattern and two implementations, to keep CI short."""
import json
import os
import subprocess
import sys

import pytest

from flashmsa import _lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("kv_dtype", ["nvfp4"])
def test_prefill_bench_quantized_kv_rows(tmp_path, kv_dtype):
    env = dict(os.environ, FLASHMSA_LIBRARY=_lib.library_path(), PYTHONPATH=os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-m", "bench.prefill", "--device", "cpu", "--out",
                           str(tmp_path), "--kv-dtype", kv_dtype, "--patterns", "random",
                           "--impls", "msa,gather", "--production-impls", "msa,gather"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    name = f"[bench.prefill cpu {kv_dtype}]"
    assert done.returncode == 0, (f"{name} exit {done.returncode}: {done.stdout[-2000:]}\n"
                                  f"{done.stderr[-2000:]}")
    with open(tmp_path / "prefill.json") as f:
        data = json.load(f)
    rows = data["rows"]
    assert data["kv_dtype"] == {"msa": kv_dtype, "baselines": "bf16"}, data["kv_dtype"]
    msa = [r for r in rows if r["impl"] == "msa"]
    assert msa and {r["group"] for r in msa} == {"m3", "production"}, f"{name} msa rows {msa}"
    for r in rows:
        row = f"{name} {r['case']} {r['impl']}"
        assert r["kv_dtype"] == (kv_dtype if r["impl"] == "msa" else "bf16"), (
            f"{row}: K/V {r['kv_dtype']}")
        assert r.get("tflops", 0) > 0, f"{row}: no timing ({r.get('note')})"
    for r in msa:
        assert r["check_rel_l2"] < 1e-2 and "CHECK FAILED" not in r["note"], (
            f"{name} {r['case']}: {r['note']}")
    assert data["production_aggregate"]["msa"]["kv_dtype"] == kv_dtype, data["production_aggregate"]
