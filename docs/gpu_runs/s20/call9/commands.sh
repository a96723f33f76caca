#!/usr/bin/env bash
# session 20, call 9: next/split-speculation 8beaad2 (build-ab/split-spec.so): decode A/B against main's kernels (d11f71c = main20b.so, two rounds), then the whole suite on the branch
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 120 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 main=build-ab/main20b.so spec=build-ab/split-spec.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log
FLASHMSA_LIBRARY=build-ab/split-spec.so FLASHMSA_COMMIT=8beaad2 BUDGET=290 TESTS_TIMEOUT=280 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1; tail -4 $OUT/gpu_check.log
