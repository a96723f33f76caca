#!/usr/bin/env bash
# session 14, call 6: multi-token prediction (8 tokens) on the one-consumer shape at small batches
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/decode-like.so TUNE_SETS=4 TUNE_CASES=1x8,2x8,4x8,8x8,12x8,24x8 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_DECODE_LIKE=1 > $OUT/tune_mtp_small.log 2>&1
grep tune $OUT/tune_mtp_small.log
