#!/usr/bin/env bash
# session 13, call 6: parameter-line touches (touch.so) against 09feab5 (final13.so)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
mkdir -p $OUT/p1
FLASHMSA_LIBRARY=build-ab/touch.so OUT=$OUT/p1 timeout 60 scripts/profile.sh decode1 --source > /dev/null 2>&1
gzip $OUT/p1/*.csv
timeout 100 python3 scripts/ab_decode.py --out $OUT/abd --rounds 1 --timeout 80 main=build-ab/final13.so touch=build-ab/touch.so > $OUT/ab_decode.log 2>&1
cat $OUT/ab_decode.log
FLASHMSA_LIBRARY=build-ab/touch.so timeout 285 python3 -m pytest tests/gpu -q -rs > $OUT/suite.log 2>&1
tail -2 $OUT/suite.log
