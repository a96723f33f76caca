#!/usr/bin/env bash
# session 18, call 3: next/spec-warp1 against main18 (767f7f9's library): decode A/B three rounds, prefill A/B one round
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 170 python3 scripts/ab_decode.py --out $OUT/abd --rounds 3 --timeout 45 main=build-ab/main18.so spec=build-ab/spec-warp1.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
timeout 200 python3 scripts/ab_decode.py --bench prefill --out $OUT/abp --rounds 1 --timeout 90 main=build-ab/main18.so spec=build-ab/spec-warp1.so > $OUT/ab_prefill.log 2>&1; tail -12 $OUT/ab_prefill.log; rm -rf $OUT/abp/*/
