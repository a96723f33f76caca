"""`python -m flashmsa bench` on the CPU: it runs, checks (PASS), and reports time and
useful TFLOP/s for every layout and K/V format."""
import subprocess
import sys

import pytest

from flashmsa import cli

SMALL = ["--device", "cpu", "--heads", "4/2", "--topk", "4", "--warmup", "0", "--iters", "1"]


@pytest.mark.parametrize("options", [
    ["--seq", "300"],
    ["--q-lens", "100,37", "--k-lens", "900,300", "--layout", "paged", "--kv-dtype", "nvfp4",
     "--pattern", "indexer"],
    ["--batch", "3", "--q-lens", "8", "--k-lens", "700", "--kv-dtype", "fp8", "--dtype", "fp16",
     "--pattern", "clustered", "--no-causal"],
], ids=["prefill", "paged-nvfp4", "decode-fp8"])
def test_bench_checks_and_reports(options, capsys):
    assert cli.main(["bench", *SMALL, *options]) == 0
    printed = capsys.readouterr().out
    assert ": PASS" in printed, printed
    assert "median" in printed and "useful TFLOP/s" in printed, printed


def test_python_dash_m_entry_point():
    result = subprocess.run([sys.executable, "-m", "flashmsa", "demo", *SMALL, "--seq", "130",
                             "--check-rows", "0"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "useful TFLOP/s" in result.stdout
