#!/usr/bin/env bash
# session 16, call 7: decode A/B, main (86ffd1b, main16.so) against next/union-throttle's default path (its producer re-reads the throttle each step: kernels 7% shorter), two rounds
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 280 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 80 main=build-ab/main16.so reread=build-ab/union-throttle.so > $OUT/ab_decode.log 2>&1
tail -14 $OUT/ab_decode.log
rm -rf $OUT/abd/*/
