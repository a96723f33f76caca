#!/usr/bin/env bash
# session 19, call 1: next/combined (speculation-in-header e72d90e + topk-divisor 4968893 merged; build-gpu = build-ab/combined.so): whole suite, then decode A/B two rounds: main (783c717 = build-ab/main18b.so), div, hdr, comb
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_COMMIT=combined BUDGET=330 TESTS_TIMEOUT=320 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1; tail -4 $OUT/gpu_check.log
timeout 230 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 main=build-ab/main18b.so div=build-ab/topk-divisor.so hdr=build-ab/speculation-in-header.so comb=build-ab/combined.so > $OUT/ab_decode.log 2>&1; tail -12 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
