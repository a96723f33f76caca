#!/usr/bin/env bash
# session 14, call 2: does fewer bytes in flight per SM (fair bandwidth shares) shorten batch 16's spread? splits at batch 64/128 (rotating inputs)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
export FLASHMSA_LIBRARY=build-ab/main.so
TUNE_SETS=4 TUNE_CASES=16x1 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_STAGES=1,2,3 FLASHMSA_TUNE_DEEP_PIPELINE=0 FLASHMSA_TUNE_SPLITS=1 > $OUT/tune_b16_stages.log 2>&1
cat $OUT/tune_b16_stages.log | grep tune
TUNE_SETS=2 TUNE_CASES=64x1,128x1 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=2 FLASHMSA_TUNE_STAGES=1 > $OUT/tune_b64_splits.log 2>&1
cat $OUT/tune_b64_splits.log | grep tune
