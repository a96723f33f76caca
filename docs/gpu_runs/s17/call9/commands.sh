#!/usr/bin/env bash
# session 17, call 9: main 8cc4d33 (kernels of 5e146fe): MTP batch 32 and 24 launch knobs re-checked with today's defaults (throttle 2): evict-first K/V loads, three stages, throttle 1
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so TUNE_SETS=3 TUNE_CASES=32x8,24x8 timeout 90 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_EVICT_FIRST=1 FLASHMSA_TUNE_PREFILL_STAGES=3 FLASHMSA_TUNE_THROTTLE=1 > $OUT/tune_knobs.log 2>&1; grep tune $OUT/tune_knobs.log
