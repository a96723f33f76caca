#!/usr/bin/env bash
# session 18, call 1: whole GPU suite on 767f7f9 (kernels of 5e146fe, evict-first rule of 5e487ee), then decode A/B (2 rounds) against main16 (ef8e2de's library)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_COMMIT=767f7f9 BUDGET=420 TESTS_TIMEOUT=400 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1; tail -15 $OUT/gpu_check.log
timeout 150 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 main16=build-ab/main16.so main=build-gpu/libflashmsa.so > $OUT/ab_decode.log 2>&1; tail -14 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
