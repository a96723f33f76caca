#!/usr/bin/env bash
# session 18, call 2: next/spec-warp1 (warp 1 issues the sorted plan's speculative block beside warp 0's plan): whole suite, MTP timeline, decode A/B (2 rounds) against main (767f7f9)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_COMMIT=spec-warp1 BUDGET=300 TESTS_TIMEOUT=290 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1; tail -4 $OUT/gpu_check.log
FLASHMSA_LIBRARY=build-ab/spec-warp1-timeline.so TIMELINE_CASES=32x8 timeout 60 python3 scripts/timeline.py > $OUT/timeline_mtp.log 2>&1; head -40 $OUT/timeline_mtp.log
timeout 150 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 main=build-ab/main16.so spec=build-gpu/libflashmsa.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
