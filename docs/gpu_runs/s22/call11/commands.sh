export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/start-marks2-timeline.so TIMELINE_CASES=1x1,64x1 timeout 120 python3 scripts/timeline.py > $OUT/timeline_start2.log 2>&1; grep -v "^  cta" $OUT/timeline_start2.log | grep -E "call|waited|located|entries|negatives|candidates|deduplicated|compacted|planned|released|k_issued|q  |first_k"
