#!/usr/bin/env bash
# session 21, call 7: main's kernels (build-ab/main20b.so): small-batch multi-token prediction (the decode suite's low-latency rows, batch 1-4) on the two-consumer kernel (default) against the one-token kernel per row (FLASHMSA_TUNE_ONE_TOKEN=2), KV 1000-200000
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/main20b.so TUNE_SETS=3 TUNE_CASES=1x8x1000,1x8x4000,1x8x32000,1x8x200000,2x8x1000,2x8x4000,2x8x32000,2x8x200000,4x8x1000,4x8x4000,4x8x10000,4x8x32000,4x8x200000 timeout 280 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_ONE_TOKEN=2 > $OUT/tune_small_mtp.log 2>&1; grep tune $OUT/tune_small_mtp.log; tail -2 $OUT/tune_small_mtp.log
