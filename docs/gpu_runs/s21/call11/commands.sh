#!/usr/bin/env bash
# session 21, call 11: main (623a230; kernels of d11f71c, build-ab/few-rows.so = 58d8073's library): split counts of multi-token prediction on the one-token kernel (batch 1, 2, 4 at 8 tokens)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/few-rows.so TUNE_SETS=3 TUNE_CASES=1x8x32000,1x8x4000,2x8x32000,2x8x4000,4x8x32000 timeout 200 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=1,2,3,4,6,8 > $OUT/tune_mtp_splits.log 2>&1; grep tune $OUT/tune_mtp_splits.log; tail -2 $OUT/tune_mtp_splits.log
