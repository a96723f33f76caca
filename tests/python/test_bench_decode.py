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


def test_paged_check_reads_only_the_rows_pages():
    """bench.common.sampled_error checks a paged call a few rows at a time, each group against a
    cache of only the pages its rows' q2k entries map to (paged_rows_call): the reference decodes
    fp8 K/V to float32 whole, which on the GPU benchmark's cache would not fit. The cut-down calls
    must give the full call's reference rows bitwise, for bf16 and fp8 caches."""
    import torch
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    import flashmsa.patterns
    import flashmsa.reference
    from bench import common, decode

    torch.manual_seed(0)
    lens, qlen, hkv, topk = [3000, 1, 128, 129, 2000], 2, 2, 4
    cu_q = common.cu_seqlens([qlen] * len(lens), "cpu")
    q2k = flashmsa.patterns.make_q2k("random", [qlen] * len(lens), lens, hkv, topk, causal=True,
                                     seed=3)
    q = common.randn((qlen * len(lens), 8, 128), torch.bfloat16, "cpu")
    for kv_dtype in (torch.bfloat16, common.FP8):
        name = f"[paged check {common.dtype_name(kv_dtype)}]"
        cache = decode.PagedCache(300, hkv, "cpu", kv_dtype)
        table = cache.page_tables(lens, 2, "cpu")[1]
        table[0, -1] = cache.num_pages + 5   # not a page: reads nothing either way
        call = dict(q=q, k=cache.msa_k, v=cache.msa_v, q2k_indices=q2k, cu_seqlens_q=cu_q,
                    causal=True, page_table=table, seqused_k=torch.tensor(lens, dtype=torch.int32),
                    k_global_scale=cache.k_scale, v_global_scale=cache.v_scale)
        rows = torch.randperm(q.shape[0])
        want = flashmsa.reference.evaluate_rows(**call, rows=rows)[0]
        parts = [common.paged_rows_call(call, part) for part in rows.split(3)]
        got = torch.cat([flashmsa.reference.evaluate_rows(**p, rows=part)[0]
                         for p, part in zip(parts, rows.split(3))])
        assert torch.equal(got, want), f"{name} cut-down calls differ from the full call"
        most = max(p["k"].shape[0] for p in parts)
        assert most <= 3 * hkv * topk < cache.num_pages, f"{name} {most} pages for 3 rows"
        out = flashmsa.msa_sparse_attention(**call)
        full = ((out.double() - want[rows.argsort()]).norm() / want.norm()).item()
        assert abs(common.sampled_error(flashmsa, out, call, count=q.shape[0]) - full) < 1e-12, (
            f"{name} sampled_error differs from the full reference's error")
