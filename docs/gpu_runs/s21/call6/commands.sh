#!/usr/bin/env bash
# session 21, call 6: main's kernels (build-ab/main20b.so, timeline build-ab/main20b-timeline.so): where batch-8 multi-token prediction's time goes at long KV: per-kernel device times (split kernel, merge kernel) and the eager timeline
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/main20b.so KERNEL_CASES=8x8x100000,8x8x10000,4x8x32768,32x8 timeout 90 python3 scripts/kernel_smoke.py --kernels > $OUT/kernels_mtp.log 2>&1; grep kernels $OUT/kernels_mtp.log; tail -2 $OUT/kernels_mtp.log
FLASHMSA_LIBRARY=build-ab/main20b-timeline.so TIMELINE_CASES=8x8x100000 timeout 90 python3 scripts/timeline.py > $OUT/timeline_8x8x100000.log 2>&1; head -32 $OUT/timeline_8x8x100000.log
