"""FlashMSA benchmarks: run as `python3 -m bench.prefill` / `python3 -m bench.decode` from the
repository root (see scripts/gpu_check.sh)."""
