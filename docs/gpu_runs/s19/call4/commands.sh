#!/usr/bin/env bash
# session 19, call 4: next/warp-skip-early (skip vote formed while the scores' wgmma runs; build-gpu = build-ab/warp-skip-early.so): decode A/B div / skip (1a13971) / early (two rounds), prefill A/B skip vs early (one round), then the whole suite on early
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 200 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 div=build-ab/topk-divisor.so skip=build-ab/warp-skip.so early=build-gpu/libflashmsa.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
timeout 120 python3 scripts/ab_decode.py --bench prefill --out $OUT/abp --rounds 1 --timeout 90 skip=build-ab/warp-skip.so early=build-gpu/libflashmsa.so > $OUT/ab_prefill.log 2>&1; tail -6 $OUT/ab_prefill.log; rm -rf $OUT/abp/*/
FLASHMSA_COMMIT=$(cat COMMIT) BUDGET=300 TESTS_TIMEOUT=290 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1; tail -4 $OUT/gpu_check.log
