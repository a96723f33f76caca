#!/usr/bin/env bash
# session 21, call 4: main (19d0f3d kernels = build-ab/main20b.so): batch-8 multi-token prediction (the decode suite's heaviest rows) on the one-consumer shape (FLASHMSA_TUNE_DECODE_LIKE=1: tiles of 4 tokens, two CTAs per SM, cluster reduction) and on the one-token kernel per row (FLASHMSA_TUNE_ONE_TOKEN=2), at every KV length of the suite
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/main20b.so TUNE_SETS=3 TUNE_CASES=8x8x1000,8x8x4000,8x8x10000,8x8x50000,8x8x100000,8x8x200000,32x8x100000 timeout 280 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_DECODE_LIKE=1 FLASHMSA_TUNE_ONE_TOKEN=2 > $OUT/tune_mtp_shapes.log 2>&1; grep tune $OUT/tune_mtp_shapes.log; tail -3 $OUT/tune_mtp_shapes.log
