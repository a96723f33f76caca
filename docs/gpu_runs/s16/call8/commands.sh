#!/usr/bin/env bash
# session 16, call 8: GPU suite on main 86ffd1b (the small-batch split rule; kernels SASS-identical to 5e146fe)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
BUDGET=420 TESTS_TIMEOUT=400 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1
tail -4 $OUT/gpu_tests.log
tail -6 $OUT/gpu_check.log
