#!/usr/bin/env bash
# session 15, call 6: main 5e146fe+ (build-gpu = bitmap.so's SASS): the whole GPU suite in one run (gpu_check.sh tests: SASS summary + suite)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
BUDGET=420 TESTS_TIMEOUT=400 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1
tail -15 $OUT/gpu_check.log
