#!/usr/bin/env bash
# session 21, call 2: main (19d0f3d kernels = build-ab/main20b.so): multi-token prediction at the decode suite's heavy long-KV rows, two-consumer kernel (default) against the one-token kernel with one CTA per row (FLASHMSA_TUNE_ONE_TOKEN=2)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/main20b.so TUNE_SETS=3 TUNE_CASES=8x8x200000,8x8x100000,8x8x50000,32x8x100000,32x8x50000,64x8x50000,8x8x10000,32x8 timeout 300 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_ONE_TOKEN=2 > $OUT/tune_one_token_mtp.log 2>&1; grep tune $OUT/tune_one_token_mtp.log; tail -3 $OUT/tune_one_token_mtp.log
