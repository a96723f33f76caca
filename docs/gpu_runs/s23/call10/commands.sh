# s23 call 10: the ring timeline with the exit field (65638a5 = build-ab/graph-timeline2.so), graph batch 1 and 16, eager batch 1; tried/trigger-none on top (none-timeline2.so), graph batch 1
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/graph-timeline2.so TIMELINE_CASES=1x1,16x1 timeout 120 python3 scripts/timeline.py --graph > $OUT/graph_main.log 2>&1; cut -c1-260 $OUT/graph_main.log
FLASHMSA_LIBRARY=build-ab/none-timeline2.so TIMELINE_CASES=1x1 timeout 90 python3 scripts/timeline.py --graph > $OUT/graph_none.log 2>&1; cut -c1-260 $OUT/graph_none.log | tail -9
FLASHMSA_LIBRARY=build-ab/graph-timeline2.so TIMELINE_CASES=1x1 timeout 60 python3 scripts/timeline.py > $OUT/eager_main.log 2>&1; head -32 $OUT/eager_main.log | tail -8
