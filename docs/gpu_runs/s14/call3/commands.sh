#!/usr/bin/env bash
# session 14, call 3: one stage (fair bandwidth shares) for the other deep-pipeline grids (rotating inputs)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
export FLASHMSA_LIBRARY=build-ab/main.so
TUNE_SETS=4 TUNE_CASES=2x1,4x1,8x1,32x1,16x1,32x8 timeout 200 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_STAGES=1,2 FLASHMSA_TUNE_DEEP_PIPELINE=0 > $OUT/tune_stages.log 2>&1
grep tune $OUT/tune_stages.log
