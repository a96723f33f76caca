#!/usr/bin/env bash
# session 21, call 5: main's kernels, timeline build (build-ab/main20b-timeline.so): eager timelines of batch 1 and batch 16 (one token), where each CTA's time goes now
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
for c in 1x1 16x1; do
  FLASHMSA_LIBRARY=build-ab/main20b-timeline.so TIMELINE_CASES=$c timeout 60 python3 scripts/timeline.py > $OUT/timeline_$c.log 2>&1; echo "== $c"; head -40 $OUT/timeline_$c.log
done
