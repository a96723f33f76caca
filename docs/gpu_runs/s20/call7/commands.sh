#!/usr/bin/env bash
# session 20, call 7: main's kernels (d11f71c = build-ab/pacing-final.so): throttle 1 against 2 under pacing, and pacing slack +0.25 / +0.5 blocks, at MTP batch 32 / 24 / 16 / 8; a third decode A/B round against 00d8393 (main20.so)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/pacing-final.so TUNE_SETS=3 TUNE_CASES=32x8,24x8,16x8,8x8 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_THROTTLE=1,2 FLASHMSA_TUNE_PACE=10,11 > $OUT/tune_paced_throttle.log 2>&1; grep tune $OUT/tune_paced_throttle.log
timeout 120 python3 scripts/ab_decode.py --out $OUT/abd --rounds 1 --timeout 45 main=build-ab/main20.so pace=build-ab/pacing-final.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
