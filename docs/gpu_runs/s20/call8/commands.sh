#!/usr/bin/env bash
# session 20, call 8: main's kernels (build-ab/main20b.so, timeline build build-ab/main20b-timeline.so): three stages under pacing (boosted CTAs then hold up to 192 KiB in flight), pacing off for reference; every CTA's timeline at MTP batch 32, paced and unpaced
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/main20b.so TUNE_SETS=3 TUNE_CASES=32x8,24x8,8x8 timeout 100 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_PREFILL_STAGES=3 FLASHMSA_TUNE_PACE=0 > $OUT/tune_stages.log 2>&1; grep tune $OUT/tune_stages.log
for pace in 9 0; do
  FLASHMSA_TUNE_PACE=$pace FLASHMSA_LIBRARY=build-ab/main20b-timeline.so TIMELINE_CASES=32x8 timeout 60 python3 scripts/timeline.py --all > $OUT/timeline_all_pace$pace.log 2>&1; echo "== pace $pace"; head -21 $OUT/timeline_all_pace$pace.log | grep -E "spread|first_k|last_k|loop|end |clock"
done
