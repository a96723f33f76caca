export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/no-promotion-timeline.so TIMELINE_CASES=128x1 timeout 120 python3 scripts/timeline.py --all > $OUT/timeline_b128_all.log 2>&1; head -30 $OUT/timeline_b128_all.log
