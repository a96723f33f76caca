#!/usr/bin/env bash
# session 16, call 1: GPU suite on main (b609b90's wide-page-table test first run); MTP timeline with the 'speculated' mark (8b25096, timeline-next.so); one-token split confirmation; next/throttle-lift (99c012c) test and lift sweep
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
BUDGET=300 TESTS_TIMEOUT=290 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1
tail -4 $OUT/gpu_tests.log
FLASHMSA_LIBRARY=build-ab/timeline-next.so TIMELINE_CASES=32x8,8x8 timeout 60 python3 scripts/timeline.py > $OUT/timeline.log 2>&1
grep -A24 "b32 t8 call 3" $OUT/timeline.log | head -26
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so TUNE_SETS=4 TUNE_CASES=4x1,8x1,12x1 timeout 70 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=2,3,4 > $OUT/tune_splits.log 2>&1
grep tune $OUT/tune_splits.log
L=build-ab/throttle-lift.so
cp tmp_test_gpu_decode_lift.py tests/gpu/test_gpu_decode_lift.py
FLASHMSA_LIBRARY=$L timeout 60 python3 -m pytest -q -rs tests/gpu/test_gpu_decode_lift.py -k "throttle" > $OUT/lift_tests.log 2>&1
tail -3 $OUT/lift_tests.log
FLASHMSA_LIBRARY=$L TUNE_SETS=4 TUNE_CASES=8x8,32x8 timeout 90 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_THROTTLE_LIFT=25,50,75 > $OUT/tune_lift.log 2>&1
grep tune $OUT/tune_lift.log
