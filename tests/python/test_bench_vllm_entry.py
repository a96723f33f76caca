"""bench/vllm_entry.py in its CPU mode (tiny shapes through the CPU backend): every row runs the
vLLM entry point and the direct msa_sparse_attention call on the same inputs, times both, and
finds their outputs bitwise equal, so the GPU run's code paths are exercised in CI; and the
bitwise comparison does catch an output that differs."""
import json
import os
import subprocess
import sys

import torch

from flashmsa import _lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_vllm_entry_bench_rows_bitwise_equal(tmp_path):
    # The bench puts the repository's python/ first on its path; the library is the one this
    # test's (installed) package uses.
    env = dict(os.environ, FLASHMSA_LIBRARY=_lib.library_path(), PYTHONPATH=os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-m", "bench.vllm_entry", "--device", "cpu",
                           "--quick", "--out", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (f"[bench.vllm_entry cpu] exit {done.returncode}: "
                                  f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    with open(tmp_path / "vllm_entry.json") as f:
        rows = json.load(f)["rows"]
    assert {r["kind"] for r in rows} == {"decode", "prefill"}, "[bench.vllm_entry cpu] kinds"
    assert any(r["qlen_max"] > 1 for r in rows if r["kind"] == "decode"), (
        "[bench.vllm_entry cpu] a multi-token-prediction row expected")
    assert any(r["batch"] > 1 for r in rows if r["kind"] == "prefill"), (
        "[bench.vllm_entry cpu] a chunked-prefill row expected")
    for case in {r["case"] for r in rows}:
        dtypes = sorted(r["kv_dtype"] for r in rows if r["case"] == case)
        assert dtypes == ["bf16", "fp8", "fp8/token"], (
            f"[bench.vllm_entry cpu] {case}: K/V rows {dtypes}")
    for r in rows:
        name = f"[bench.vllm_entry cpu] {r['case']} [{r['kv_dtype']}]"
        assert r["bitwise_equal"] is True and r["mismatches"] == 0, f"{name}: {r['note']}"
        assert r["direct_us"] > 0 and r["entry_us"] > 0, f"{name}: no timing ({r['note']})"
        assert r["note"] == "", f"{name}: {r['note']}"


def test_vllm_entry_bench_catches_a_differing_output(tmp_path, monkeypatch):
    """One bit flipped in each entry point's output: the rows must say so, element count and
    all, and the run must count as failed."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    import flashmsa.integrations.vllm as ops
    from bench import vllm_entry

    def flip_one_bit(op):
        def call(*args, **kwargs):
            out = op(*args, **kwargs)
            out.view(torch.int16)[0, 0, 0] ^= 1
            return out
        return call

    for name in ("minimax_m3_sparse_attn", "minimax_m3_sparse_attn_decode"):
        monkeypatch.setattr(ops, name, flip_one_bit(getattr(ops, name)))
    args = vllm_entry.parse_args(["--device", "cpu", "--kv-dtype", "auto", "--out",
                                  str(tmp_path), "--rows", "decode_b1_kv1000,prefill_q256_kv1024"])
    rows = vllm_entry.run(args)
    assert [r["case"] for r in rows] == ["decode_b1_kv1000", "prefill_q256_kv1024"]
    for r in rows:
        assert r["bitwise_equal"] is False and r["mismatches"] == 1, r
        assert "OUTPUTS DIFFER in 1 elements" in r["note"], r["note"]
    assert len(vllm_entry.failures(rows)) == 2
