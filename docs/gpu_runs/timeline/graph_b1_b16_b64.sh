# s24 call 2: graph-replay timeline of main's kernels (d3a9080 + the kMarkPageRowShared mark and every phase's median in timeline.py; build-ab/main-timeline.so), batch 1, 16, 64
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/main-timeline.so TIMELINE_CASES=1x1,16x1,64x1 timeout 150 python3 scripts/timeline.py --graph > $OUT/graph_main.log 2>&1; grep -E "every phase|    call" $OUT/graph_main.log | cut -c1-600
