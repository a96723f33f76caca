#!/usr/bin/env bash
# session 19, call 3: next/warp-skip (on main + next/topk-divisor merged; build-gpu = build-ab/warp-skip.so): prefill A/B (main = 783c717, div, skip; one round), decode A/B div vs skip (two rounds), then the whole suite
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 200 python3 scripts/ab_decode.py --bench prefill --out $OUT/abp --rounds 1 --timeout 90 main=build-ab/main18b.so div=build-ab/topk-divisor.so skip=build-gpu/libflashmsa.so > $OUT/ab_prefill.log 2>&1; tail -6 $OUT/ab_prefill.log; rm -rf $OUT/abp/*/
timeout 170 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 div=build-ab/topk-divisor.so skip=build-gpu/libflashmsa.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
FLASHMSA_COMMIT=$(cat COMMIT) BUDGET=330 TESTS_TIMEOUT=320 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1; tail -4 $OUT/gpu_check.log
