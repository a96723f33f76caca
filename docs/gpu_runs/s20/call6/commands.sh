#!/usr/bin/env bash
# session 20, call 6: next/pacing d11f71c (build-ab/pacing-final.so; pacing on by default): decode A/B against main (00d8393 = main20.so, two rounds), prefill A/B (one round), then the whole suite
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 120 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 main=build-ab/main20.so pace=build-ab/pacing-final.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
timeout 130 python3 scripts/ab_decode.py --bench prefill --out $OUT/abp --rounds 1 --timeout 90 main=build-ab/main20.so pace=build-ab/pacing-final.so > $OUT/ab_prefill.log 2>&1; tail -6 $OUT/ab_prefill.log; rm -rf $OUT/abp/*/
FLASHMSA_LIBRARY=build-ab/pacing-final.so FLASHMSA_COMMIT=d11f71c BUDGET=300 TESTS_TIMEOUT=290 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1; tail -4 $OUT/gpu_check.log
