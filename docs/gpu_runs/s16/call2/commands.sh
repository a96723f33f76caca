#!/usr/bin/env bash
# session 16, call 2: next/start-prefetch (FLASHMSA_TUNE_START_PREFETCH: the sorted warp plan's speculation also prefetches the next lowest blocks into L2): its test, then the MTP sweep
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
L=build-ab/start-prefetch.so
FLASHMSA_LIBRARY=$L timeout 90 python3 -m pytest -q -rs tests/gpu/test_gpu_decode.py -k "start_prefetch or inflight_throttle" > $OUT/prefetch_tests.log 2>&1
tail -3 $OUT/prefetch_tests.log
FLASHMSA_LIBRARY=$L TUNE_SETS=3 TUNE_CASES=32x8,64x8,128x8 timeout 240 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_START_PREFETCH=1,2,3,4,6 > $OUT/tune_prefetch.log 2>&1
grep tune $OUT/tune_prefetch.log
