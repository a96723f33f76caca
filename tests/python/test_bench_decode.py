"""bench/decode.py in its CPU mode (tiny shapes through the CPU backend): every row is timed and
checked against the fp64 evaluation, and the issue-4 rows carry their same-run baselines (dense
SDPA of equal work, gather-based PyTorch), so the GPU run's code paths are exercised in CI; the
same for NVFP4 K/V (--kv-dtype nvfp4) and the bf16 / fp8 / nvfp4 run (--kv-dtype all) with its
ratios, whose KV bytes follow contract section 10 (the bytes read: NVFP4 D/2 bytes a key row
plus D/16 of block scales)."""
import json
import os
import subprocess
import sys

import pytest

from flashmsa import _lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
D = 128
BLOCK_BYTES_BF16 = 2 * 128 * D * 2     # K + V of one 128-key block of one KV head, bf16
BLOCK_BYTES_NVFP4 = 2 * 128 * (D // 2 + D // 16)
BLOCK_SCALE_BYTES_NVFP4 = 2 * 128 * (D // 16)


def run_decode_bench(tmp_path, *extra):
    """bench.decode --device cpu with `extra` options; its decode.json."""
    # The bench puts the repository's python/ first on its path; the library is the one this
    # test's (installed) package uses.
    env = dict(os.environ, FLASHMSA_LIBRARY=_lib.library_path(), PYTHONPATH=os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-m", "bench.decode", "--device", "cpu", "--out",
                           str(tmp_path), *extra], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    name = " ".join(["[bench.decode cpu", *extra]) + "]"
    assert done.returncode == 0, f"{name} exit {done.returncode}: {done.stderr[-2000:]}"
    with open(tmp_path / "decode.json") as f:
        return json.load(f), done.stdout


def test_decode_bench_rows_and_baselines(tmp_path):
    rows = run_decode_bench(tmp_path)[0]["rows"]
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


def test_decode_bench_nvfp4_rows(tmp_path):
    """--kv-dtype nvfp4: FlashMSA's rows read the NVFP4 cache, pass the sampled check, and count
    D/2 + D/16 bytes a key row of K or V; the baselines stay bf16."""
    data, _ = run_decode_bench(tmp_path, "--kv-dtype", "nvfp4")
    rows = data["rows"]
    assert data["kv_dtype"] == {"msa": "nvfp4", "baselines": "bf16"}, data["kv_dtype"]
    assert rows and any(r["suite"] == "issue4" for r in rows), "[bench.decode nvfp4] no rows"
    for r in rows:
        name = f"[bench.decode nvfp4] {r['case']}"
        assert r["kv_dtype"] == "nvfp4", f"{name}: K/V {r['kv_dtype']}"
        assert r.get("GBps", 0) > 0, f"{name}: no timing ({r.get('note')})"
        assert "CHECK FAILED" not in r["note"], f"{name}: {r['note']}"
        blocks, rest = divmod(r["kv_bytes"], BLOCK_BYTES_NVFP4)
        assert blocks > 0 and rest == 0, f"{name}: {r['kv_bytes']} bytes, not whole NVFP4 blocks"
        assert r["kv_scale_bytes"] == blocks * BLOCK_SCALE_BYTES_NVFP4, f"{name}: scale bytes"
        if r["suite"] == "issue4":
            assert r["baseline_kv_dtype"] == "bf16", f"{name}: {r['baseline_kv_dtype']}"
            assert all(r.get(f"{impl}_GBps") for impl in ("sdpa_cudnn", "sdpa_flash", "gather")), (
                f"{name}: baselines missing ({r.get('baseline_note')})")


def test_decode_bench_all_kv_dtypes_and_ratios(tmp_path):
    """--kv-dtype all: every case runs bf16, fp8 and nvfp4 on the same selection (KV bytes 2, 1 and
    (D/2 + D/16) / D bytes an element of the same blocks), the baselines once, on the bf16 row;
    the ratio table holds each quantized call's time over the bf16 call's on the issue-4 rows."""
    data, stdout = run_decode_bench(tmp_path, "--kv-dtype", "all")
    rows = data["rows"]
    cases = list(dict.fromkeys(r["case"] for r in rows))
    assert len(cases) > 2, f"[bench.decode all] cases {cases}"
    for case in cases:
        name = f"[bench.decode all] {case}"
        by_kv = {r["kv_dtype"]: r for r in rows if r["case"] == case}
        assert sorted(by_kv) == ["bf16", "fp8", "nvfp4"], f"{name}: rows {sorted(by_kv)}"
        for kv, r in by_kv.items():
            assert r.get("GBps", 0) > 0, f"{name} [{kv}]: no timing ({r.get('note')})"
            assert "CHECK FAILED" not in r["note"], f"{name} [{kv}]: {r['note']}"
        blocks, rest = divmod(by_kv["bf16"]["kv_bytes"], BLOCK_BYTES_BF16)
        assert blocks > 0 and rest == 0, f"{name}: bf16 bytes {by_kv['bf16']['kv_bytes']}"
        assert by_kv["fp8"]["kv_bytes"] == blocks * BLOCK_BYTES_BF16 // 2, f"{name}: fp8 bytes"
        assert by_kv["nvfp4"]["kv_bytes"] == blocks * BLOCK_BYTES_NVFP4, f"{name}: nvfp4 bytes"
        assert by_kv["nvfp4"]["kv_scale_bytes"] == blocks * BLOCK_SCALE_BYTES_NVFP4, name
        for kv in ("fp8", "nvfp4"):
            want = by_kv[kv]["time_us"] / by_kv["bf16"]["time_us"]
            assert by_kv[kv]["time_vs_bf16"] == pytest.approx(want), f"{name} [{kv}] ratio"
        issue4 = by_kv["bf16"]["suite"] == "issue4"
        assert bool(by_kv["bf16"].get("gather_GBps")) == issue4, f"{name}: bf16 baselines"
        assert "gather_GBps" not in by_kv["fp8"] and "gather_GBps" not in by_kv["nvfp4"], (
            f"{name}: baselines ran again on a quantized row")
    ratios = data["kv_dtype_ratios"]
    issue4 = [c for c in cases if any(r["case"] == c and r["suite"] == "issue4" for r in rows)]
    assert [t["case"] for t in ratios] == issue4, f"[bench.decode all] ratio rows {ratios}"
    for t in ratios:
        assert t["fp8_x"] == pytest.approx(t["fp8"] / t["bf16"]), t
        assert t["nvfp4_x"] == pytest.approx(t["nvfp4"] / t["bf16"]), t
    assert "fraction of the bf16 call's" in stdout, "[bench.decode all] no ratio table printed"
    assert set(data["suite_weighted_by_kv_dtype"]) == {"bf16", "fp8", "nvfp4"}, data.keys()
    # scripts/gpu_check.sh reads the last "decode suite full" line: bf16's.
    suite = [line for line in stdout.splitlines() if line.startswith("decode suite full")]
    assert suite and suite[-1].endswith("K/V bf16"), suite


@pytest.mark.parametrize("paged", [True, False])
def test_nvfp4_quantized_in_slices_matches_quantize_nvfp4(monkeypatch, paged):
    """bench.common.to_nvfp4 quantizes a large cache a slice at a time (bounded temporaries): the
    packed values and the swizzled scale table must be quantize_nvfp4's of the whole, bitwise,
    also where a slice's rows do not start a 128-row group of its own (flat, Hkv 3) and the last
    slice is short."""
    import torch
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from flashmsa.quantize import quantize_nvfp4
    from bench import common

    torch.manual_seed(0)
    shape = (7, 2, 128, D) if paged else (1000, 3, D)
    x = common.randn(shape, torch.bfloat16, "cpu")
    monkeypatch.setattr(common, "_NVFP4_ELEMENTS", 3 * 128 * D)   # several slices
    got = common.to_nvfp4(x, paged)
    want = quantize_nvfp4(x, paged=paged)
    name = f"[to_nvfp4 {'paged' if paged else 'flat'}]"
    assert torch.equal(got[0], want[0]), f"{name} packed values differ"
    assert got[1].shape == want[1].shape and torch.equal(got[1], want[1]), (
        f"{name} scale tables differ")


def test_paged_check_reads_only_the_rows_pages():
    """bench.common.sampled_error checks a paged call a few rows at a time, each group against a
    cache of only the pages its rows' q2k entries map to (paged_rows_call): the reference decodes
    fp8 and NVFP4 K/V to float32 whole, which on the GPU benchmark's cache would not fit. The
    cut-down calls (NVFP4: with their pages' part of the swizzled scale tables) must give the full
    call's reference rows bitwise, for bf16, fp8 and NVFP4 caches."""
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
    for kv_dtype in (torch.bfloat16, common.FP8, common.NVFP4):
        name = f"[paged check {common.dtype_name(kv_dtype)}]"
        cache = decode.PagedCache(300, hkv, "cpu", kv_dtype)
        table = cache.page_tables(lens, 2, "cpu")[1]
        table[0, -1] = cache.num_pages + 5   # not a page: reads nothing either way
        call = dict(q=q, k=cache.msa_k, v=cache.msa_v, q2k_indices=q2k, cu_seqlens_q=cu_q,
                    causal=True, page_table=table, seqused_k=torch.tensor(lens, dtype=torch.int32),
                    **cache.scales)
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
