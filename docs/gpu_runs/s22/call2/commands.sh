export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 200 build-probe/gather_ceiling 3 2>&1 | tee $OUT/gather_ceiling.log
FLASHMSA_LIBRARY=build-ab/main20b-timeline.so TIMELINE_CASES=1x1,16x1,64x1 timeout 120 python3 scripts/timeline.py 2>&1 | tee $OUT/timeline.log | head -150
