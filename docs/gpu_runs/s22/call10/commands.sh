export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/start-marks-timeline.so TIMELINE_CASES=1x1,64x1,128x1 timeout 120 python3 scripts/timeline.py --all > $OUT/timeline_start.log 2>&1; grep -v "^  cta" $OUT/timeline_start.log | grep -E "call|waited|located|entries|negatives|compacted|planned|released|k_issued|q  |first_k"
