#!/usr/bin/env bash
# session 14, call 7: split counts of the two-consumer kernel at 8 tokens a request (the launch's unit count is a bound twice the real tiles there)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/decode-like.so TUNE_SETS=4 TUNE_CASES=1x8,2x8,4x8,8x8,12x8,16x8 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=2,4,8,16 > $OUT/tune_mtp_splits.log 2>&1
grep tune $OUT/tune_mtp_splits.log
