#!/usr/bin/env bash
# session 20, call 5: next/pacing 314e7c1 (build-ab/boost2.so): the boost's slack from -2 to +0.5 blocks (FLASHMSA_TUNE_BOOST 1, 5, 7, 9, 11), against throttle 0 and 1 for everyone, at MTP batch 32 / 24 / 16 / 8
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/boost2.so TUNE_SETS=3 TUNE_CASES=32x8,24x8,16x8,8x8 timeout 200 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_BOOST=1,5,7,9,11 FLASHMSA_TUNE_THROTTLE=0,1 > $OUT/tune_boost2.log 2>&1; grep tune $OUT/tune_boost2.log
