#!/usr/bin/env bash
# session 20, call 3: next/pacing (8e38d0c = build-ab/pacing.so, timeline build build-ab/pacing-timeline.so): its tests, a pace sweep at MTP batch 32 / 24 / 8 against main (00d8393 = main20.so) in the same run, MTP timelines unpaced and paced
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/pacing.so timeout 90 python3 -m pytest -q tests/gpu/test_gpu_decode.py -k "paced or throttle" > $OUT/tests_pacing.log 2>&1; tail -2 $OUT/tests_pacing.log
for n in main20 pacing; do
  FLASHMSA_LIBRARY=build-ab/$n.so TUNE_SETS=3 TUNE_CASES=32x8,24x8,8x8 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_PACE=1,2,3,5,9 > $OUT/tune_pace_$n.log 2>&1; echo "== $n"; grep tune $OUT/tune_pace_$n.log
done
for pace in 0 3; do
  FLASHMSA_TUNE_PACE=$pace FLASHMSA_LIBRARY=build-ab/pacing-timeline.so TIMELINE_CASES=32x8 timeout 60 python3 scripts/timeline.py > $OUT/timeline_pace$pace.log 2>&1; echo "== pace $pace"; head -21 $OUT/timeline_pace$pace.log | grep -E "spread|planned|first_k|last_k|loop|end |clock"
done
