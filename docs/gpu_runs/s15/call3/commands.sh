#!/usr/bin/env bash
# session 15, call 3: one-token split counts at two CTAs per SM of one stage (batch 8/16/32; defaults 4/2/1); decode A/B: throttle-wave.so (f.. one-wave MTP throttle) against main15.so, two rounds
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/main15.so TUNE_SETS=4 TUNE_CASES=8x1,16x1,32x1 timeout 120 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=1,2,3,4,8 > $OUT/tune_splits.log 2>&1
grep tune $OUT/tune_splits.log
timeout 250 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 80 main=build-ab/main15.so new=build-ab/throttle-wave.so > $OUT/ab_decode.log 2>&1
tail -10 $OUT/ab_decode.log
