#!/usr/bin/env bash
# session 15, call 4: next/bitmap-union (8d519e0, bitmap.so: the two-consumer warp plan's union through a bitmap, on the one-wave MTP throttle): suite with the branch's tests; MTP and suite-row tune, bitmap against the sorting network in one run; decode A/B against main15.so (ac4ae55) two rounds; prefill A/B one round
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
B=build-ab/bitmap.so
FLASHMSA_LIBRARY=$B timeout 285 python3 -m pytest tests/gpu -q -rs > $OUT/suite.log 2>&1
tail -3 $OUT/suite.log
FLASHMSA_LIBRARY=$B TUNE_SETS=2 TUNE_CASES=8x8,32x8,128x8x4000,8x8x100000 timeout 80 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SORTED_WARP_PLAN=2 > $OUT/tune_bitmap.log 2>&1
grep tune $OUT/tune_bitmap.log
timeout 250 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 80 main=build-ab/main15.so new=$B > $OUT/ab_decode.log 2>&1
tail -10 $OUT/ab_decode.log
rm -rf $OUT/abd/*/
timeout 200 python3 scripts/ab_decode.py --bench prefill --out $OUT/abp --rounds 1 --timeout 90 main=build-ab/main15.so new=$B > $OUT/ab_prefill.log 2>&1
tail -12 $OUT/ab_prefill.log
rm -rf $OUT/abp/*/
