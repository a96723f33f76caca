#!/usr/bin/env bash
# session 18, call 4: 9074209 (next/spec-warp1, build-ab/spec-warp1.so): throttle sweep at MTP now that the plan ends sooner, then three more decode A/B rounds against main18 (767f7f9)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/spec-warp1.so TUNE_SETS=3 TUNE_CASES=32x8,24x8,16x8,64x8 timeout 90 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_THROTTLE=1,0 > $OUT/tune_throttle.log 2>&1; grep tune $OUT/tune_throttle.log
timeout 170 python3 scripts/ab_decode.py --out $OUT/abd --rounds 3 --timeout 45 spec=build-ab/spec-warp1.so main=build-ab/main18.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
