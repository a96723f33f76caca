#!/usr/bin/env bash
# session 21, call 12: the review commit (tests and scripts only; library = build-ab/few-rows.so, main's kernels and launch rules): the multi-row GPU tests through their shared check, and the scripts' case lists (kernel_smoke --kernels / --tune, timeline)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/few-rows.so timeout 150 python3 -m pytest -q tests/gpu/test_gpu_one_token.py -k "multi_row" > $OUT/multi_row_tests.log 2>&1; tail -2 $OUT/multi_row_tests.log
FLASHMSA_LIBRARY=build-ab/few-rows.so KERNEL_CASES=1x8x4000,2x1 timeout 60 python3 scripts/kernel_smoke.py --kernels > $OUT/kernels.log 2>&1; grep kernels $OUT/kernels.log; tail -1 $OUT/kernels.log
FLASHMSA_LIBRARY=build-ab/few-rows.so TUNE_CASES=1x8x4000,4x1 timeout 60 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_ONE_TOKEN=0 > $OUT/tune.log 2>&1; grep tune $OUT/tune.log
FLASHMSA_LIBRARY=build-ab/main20b-timeline.so TIMELINE_CASES=1x8x4000 timeout 60 python3 scripts/timeline.py > $OUT/timeline.log 2>&1; head -4 $OUT/timeline.log
