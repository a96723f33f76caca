#!/usr/bin/env bash
# session 17, call 10: evict-first K/V loads for multi-token prediction (one tile per request; launch.cu host rule, committed as 5e487ee, build-gpu = build-ab/evict-mtp.so): sweep against FLASHMSA_TUNE_EVICT_FIRST=0 (main's policy), MTP tests, decode A/B against main16
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
L=build-gpu/libflashmsa.so
FLASHMSA_LIBRARY=$L TUNE_SETS=3 TUNE_CASES=32x8,64x8,8x8x100000,16x8,128x8x50000 timeout 70 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_EVICT_FIRST=0 > $OUT/tune_evict.log 2>&1; grep tune $OUT/tune_evict.log
FLASHMSA_LIBRARY=$L timeout 100 python3 -m pytest -q tests/gpu/test_gpu_decode.py tests/gpu/test_gpu_determinism.py -k "(test_decode_bf16 and 8) or (test_decode_fp16 and 8) or unequal_rows or (throttle and mtp) or graph_replay or (sorted and mtp)" > $OUT/mtp_tests.log 2>&1; tail -3 $OUT/mtp_tests.log
timeout 80 python3 scripts/ab_decode.py --out $OUT/abd --rounds 1 --timeout 45 main=build-ab/main16.so evict=$L > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
