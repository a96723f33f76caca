#!/usr/bin/env bash
# session 16, call 3: every CTA of MTP batch 32's timeline (main's kernels + marks: timeline-next.so) to correlate ends with union sizes under the throttle; one-token split sweep at batch 2-7 (main)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/timeline-next.so TIMELINE_CASES=32x8 timeout 60 python3 scripts/timeline.py --all > $OUT/timeline_all.log 2>&1
head -22 $OUT/timeline_all.log
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so TUNE_SETS=3 TUNE_CASES=2x1,3x1,4x1,5x1,6x1,7x1 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=3,4,6,8 > $OUT/tune_small_splits.log 2>&1
grep tune $OUT/tune_small_splits.log
