#!/usr/bin/env bash
# session 13, call 5: ncu source profiles of batch 1 and 16 at 09feab5; small-batch split sweep on rotating inputs
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
export FLASHMSA_LIBRARY=build-ab/final13.so
mkdir -p $OUT/p1 $OUT/p16
TUNE_SETS=4 TUNE_CASES=4x1,8x1,16x1 timeout 100 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=1,2,4,8 > $OUT/tune_small.log 2>&1
OUT=$OUT/p1 timeout 170 scripts/profile.sh decode1 --source > /dev/null 2>&1
OUT=$OUT/p16 timeout 170 scripts/profile.sh decode16 --source > /dev/null 2>&1
gzip $OUT/p1/*.csv $OUT/p16/*.csv
ls -la $OUT/p1 $OUT/p16
