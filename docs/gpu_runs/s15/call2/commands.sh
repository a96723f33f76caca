#!/usr/bin/env bash
# session 15, call 2: next/throttle-default (efe0d0e, throttle-default.so: MTP runs throttle 2 by default): suite with the branch's tests; decode A/B against main (main15.so = ac4ae55), two rounds; b16/b32 one token, deep pipeline + throttle 2 against main's default in one run
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/throttle-default.so timeout 285 python3 -m pytest tests/gpu -q -rs > $OUT/suite.log 2>&1
tail -3 $OUT/suite.log
timeout 250 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 80 main=build-ab/main15.so new=build-ab/throttle-default.so > $OUT/ab_decode.log 2>&1
tail -10 $OUT/ab_decode.log
FLASHMSA_LIBRARY=build-ab/throttle-default.so FLASHMSA_TUNE_THROTTLE=2 TUNE_SETS=4 TUNE_CASES=16x1,32x1 timeout 40 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_DEEP_PIPELINE=1 > $OUT/tune_deep_vs_main.log 2>&1
grep tune $OUT/tune_deep_vs_main.log
rm -rf $OUT/abd/*/
