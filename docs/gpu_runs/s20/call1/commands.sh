#!/usr/bin/env bash
# session 20, call 1: next/softmax-fast-path (7935eb4 = build-ab/softmax-fast-path.so) against main's kernels (31d89ea = build-ab/warp-skip-early.so): prefill A/B (one round), decode A/B (two rounds), then the whole suite on sfp
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 130 python3 scripts/ab_decode.py --bench prefill --out $OUT/abp --rounds 1 --timeout 90 early=build-ab/warp-skip-early.so sfp=build-ab/softmax-fast-path.so > $OUT/ab_prefill.log 2>&1; tail -6 $OUT/ab_prefill.log; rm -rf $OUT/abp/*/
timeout 120 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 early=build-ab/warp-skip-early.so sfp=build-ab/softmax-fast-path.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
FLASHMSA_LIBRARY=build-ab/softmax-fast-path.so FLASHMSA_COMMIT=7935eb4 BUDGET=320 TESTS_TIMEOUT=310 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1; tail -4 $OUT/gpu_check.log
