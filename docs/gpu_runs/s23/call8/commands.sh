# s23 call 8: the first graph-replay timeline (0993e4b, the printf build with a ring beside it: staging rows by CTA index only, so with the programmatic overlap calls 0-2 of each replay lost their early marks, and the kernels still held printf). build-ab/graph-timeline.so = 0993e4b timeline build, none-timeline.so = the same with tried/trigger-none
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/graph-timeline.so TIMELINE_CASES=1x1,16x1,64x1 timeout 150 python3 scripts/timeline.py --graph > $OUT/graph_main.log 2>&1; grep -v "^TL" $OUT/graph_main.log | tail -45
FLASHMSA_LIBRARY=build-ab/none-timeline.so TIMELINE_CASES=1x1 timeout 100 python3 scripts/timeline.py --graph > $OUT/graph_none.log 2>&1; grep -v "^TL" $OUT/graph_none.log | tail -16
