#!/usr/bin/env bash
# session 14, call 4: one stage for the one-consumer prefill kernel's decode grids (2 and 4 tokens a request)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
export FLASHMSA_LIBRARY=build-ab/main.so
TUNE_SETS=4 TUNE_CASES=4x2,8x2,16x2,32x2,8x4,16x4 timeout 200 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_STAGES=1,2 FLASHMSA_TUNE_DEEP_PIPELINE=0 > $OUT/tune_stages_multi.log 2>&1
grep tune $OUT/tune_stages_multi.log
