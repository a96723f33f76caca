#!/usr/bin/env bash
# session 21, call 9: next/few-rows-one-token (58d8073 = build-ab/few-rows.so; host rule only, kernels' SASS = main's): the whole GPU suite, then the decode benchmark A/B against main (build-ab/main20b.so) with the suite's low-latency rows, one round
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/few-rows.so FLASHMSA_COMMIT=58d8073 BUDGET=300 TESTS_TIMEOUT=290 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1; tail -4 $OUT/gpu_check.log; grep -E "FAIL|Error" $OUT/gpu_tests.log | head -10
timeout 200 python3 scripts/ab_decode.py --low-latency --out $OUT/abd --rounds 1 --timeout 95 main=build-ab/main20b.so rows=build-ab/few-rows.so > $OUT/ab_decode.log 2>&1; tail -24 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
