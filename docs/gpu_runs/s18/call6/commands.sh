#!/usr/bin/env bash
# session 18, call 6: 783c717 (own-token mask word by word, on 9074209's warp-1 speculation; build-gpu = build-ab/own-mask.so): whole suite, MTP timeline, decode A/B (main18 = 767f7f9, spec = 9074209, mask = 783c717; two rounds), prefill A/B (main18 against mask, one round)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_COMMIT=783c717 BUDGET=260 TESTS_TIMEOUT=250 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1; tail -3 $OUT/gpu_check.log
FLASHMSA_LIBRARY=build-ab/own-mask-timeline.so TIMELINE_CASES=32x8 timeout 50 python3 scripts/timeline.py > $OUT/timeline_mtp.log 2>&1; head -22 $OUT/timeline_mtp.log
timeout 200 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 main=build-ab/main18.so spec=build-ab/spec-warp1.so mask=build-gpu/libflashmsa.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
timeout 120 python3 scripts/ab_decode.py --bench prefill --out $OUT/abp --rounds 1 --timeout 90 main=build-ab/main18.so mask=build-gpu/libflashmsa.so > $OUT/ab_prefill.log 2>&1; tail -6 $OUT/ab_prefill.log; rm -rf $OUT/abp/*/
