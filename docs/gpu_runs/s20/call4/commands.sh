#!/usr/bin/env bash
# session 20, call 4: next/pacing with the boost (a05406f = build-ab/boost.so, timeline build-ab/boost-timeline.so): boost sweep at MTP batch 32 / 24 / 8, boost with holds, timeline with boost 3
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/boost.so TUNE_SETS=3 TUNE_CASES=32x8,24x8,8x8 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_BOOST=1,2,3,5,8 > $OUT/tune_boost.log 2>&1; echo "== boost"; grep tune $OUT/tune_boost.log
FLASHMSA_TUNE_PACE=4 FLASHMSA_LIBRARY=build-ab/boost.so TUNE_SETS=3 TUNE_CASES=32x8,24x8 timeout 100 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_BOOST=1,3 > $OUT/tune_boost_pace4.log 2>&1; echo "== boost with pace 4"; grep tune $OUT/tune_boost_pace4.log
for b in 2 5; do
  FLASHMSA_TUNE_BOOST=$b FLASHMSA_LIBRARY=build-ab/boost-timeline.so TIMELINE_CASES=32x8 timeout 60 python3 scripts/timeline.py > $OUT/timeline_boost$b.log 2>&1; echo "== boost $b"; head -21 $OUT/timeline_boost$b.log | grep -E "spread|first_k|last_k|loop|end |clock"
done
