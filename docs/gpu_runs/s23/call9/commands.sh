# s23 call 9: the ring timeline (3f6535f, no printf, staging by %gridid; build-ab/graph-timeline.so): eager batch 1 and 64, graph batch 1, 16 and 64; tried/trigger-none on top (none-timeline.so), graph batch 1. Its "end" preceded each CTA exit by about 3 us of the record itself (fixed in 558b809)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/graph-timeline.so TIMELINE_CASES=1x1,64x1 timeout 90 python3 scripts/timeline.py > $OUT/eager_main.log 2>&1; head -30 $OUT/eager_main.log
FLASHMSA_LIBRARY=build-ab/graph-timeline.so TIMELINE_CASES=1x1,16x1,64x1 timeout 150 python3 scripts/timeline.py --graph > $OUT/graph_main.log 2>&1; cat $OUT/graph_main.log | cut -c1-250
FLASHMSA_LIBRARY=build-ab/none-timeline.so TIMELINE_CASES=1x1 timeout 90 python3 scripts/timeline.py --graph > $OUT/graph_none.log 2>&1; cat $OUT/graph_none.log | cut -c1-250
