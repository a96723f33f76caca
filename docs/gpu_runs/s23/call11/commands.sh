# s23 call 11: the ring timeline after the record fix (558b809 = build-ab/graph-timeline3.so): graph batch 1 and 16, eager batch 1
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/graph-timeline3.so TIMELINE_CASES=1x1,16x1 timeout 120 python3 scripts/timeline.py --graph > $OUT/graph_main.log 2>&1; grep -E "hand-over|->|call 0:" $OUT/graph_main.log | cut -c1-250
FLASHMSA_LIBRARY=build-ab/graph-timeline3.so TIMELINE_CASES=1x1 timeout 60 python3 scripts/timeline.py > $OUT/eager_main.log 2>&1; grep -E "end|exit|waited" $OUT/eager_main.log | head -4
