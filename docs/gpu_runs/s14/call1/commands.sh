#!/usr/bin/env bash
# session 14, call 1: suite on next/param-dedup (stacked on next/combine-prefetch); decode A/B main vs both branches
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/param-dedup.so timeout 285 python3 -m pytest tests/gpu -q -rs > $OUT/suite.log 2>&1
tail -3 $OUT/suite.log
timeout 290 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 80 main=build-ab/main.so pf=build-ab/combine-prefetch.so dd=build-ab/param-dedup.so > $OUT/ab_decode.log 2>&1
tail -40 $OUT/ab_decode.log
