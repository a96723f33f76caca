#!/usr/bin/env bash
# session 21, call 8: main's kernels (build-ab/main20b.so): where the one-token kernel per row (FLASHMSA_TUNE_ONE_TOKEN=2) stops winning: batch 3-6 at 8 tokens, and 2 or 4 tokens per request, short and long KV
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/main20b.so TUNE_SETS=3 TUNE_CASES=3x8x4000,3x8x100000,5x8x4000,5x8x100000,6x8x4000,6x8x100000,1x2x4000,4x2x4000,16x2x4000,16x2x100000,32x2x4000,8x4x4000,8x4x100000,16x4x4000,2x4x4000 timeout 280 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_ONE_TOKEN=2 > $OUT/tune_boundary.log 2>&1; grep tune $OUT/tune_boundary.log; tail -2 $OUT/tune_boundary.log
