#!/usr/bin/env bash
# session 21, call 1: next/one-token-pacing merged with main (48bb987, build-ab/one-token-pacing2.so): its paced/throttle/graph decode tests, pacing tune of the one-token deep pipeline, then the whole suite on main (19d0f3d = build-ab/main20b.so kernels) incl. the (8,8) graph-replay cases not yet run
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
B=build-ab/one-token-pacing2.so
FLASHMSA_LIBRARY=$B timeout 100 python3 -m pytest -q tests/gpu/test_gpu_decode.py -k "paced or throttle or graph" > $OUT/branch_tests.log 2>&1; tail -3 $OUT/branch_tests.log
FLASHMSA_LIBRARY=$B FLASHMSA_TUNE_DEEP_PIPELINE=1 FLASHMSA_TUNE_THROTTLE=2 TUNE_SETS=3 TUNE_CASES=16x1,8x1,32x1 timeout 80 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_PACE=0,9,11 > $OUT/tune_deep_pace.log 2>&1; tail -12 $OUT/tune_deep_pace.log
FLASHMSA_LIBRARY=$B TUNE_SETS=3 TUNE_CASES=16x1,8x1,32x1 timeout 40 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_PACE=0 > $OUT/tune_default.log 2>&1; tail -6 $OUT/tune_default.log
FLASHMSA_LIBRARY=build-ab/main20b.so TUNE_SETS=3 TUNE_CASES=16x1,8x1,32x1 timeout 40 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_PACE=0 > $OUT/tune_main.log 2>&1; tail -6 $OUT/tune_main.log
FLASHMSA_LIBRARY=build-ab/main20b.so FLASHMSA_COMMIT=19d0f3d BUDGET=300 TESTS_TIMEOUT=290 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1; tail -4 $OUT/gpu_check.log
