#!/usr/bin/env bash
# session 16, call 10 (main 533ebcb's library, kernels of 5e146fe): MTP batch 8 split counts at the decode suite's heavy KV lengths (4 splits = 128 CTAs by default); one-token batch 13-24 split counts
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
L=build-gpu/libflashmsa.so
FLASHMSA_LIBRARY=$L TUNE_SETS=3 TUNE_CASES=8x8x100000,8x8x200000,8x8x50000,8x8x10000 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=2,3,4 > $OUT/tune_mtp_b8_splits.log 2>&1
grep tune $OUT/tune_mtp_b8_splits.log
FLASHMSA_LIBRARY=$L TUNE_SETS=3 TUNE_CASES=13x1,14x1,15x1,20x1,24x1 timeout 60 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=1,2,3 > $OUT/tune_one_token_13to24.log 2>&1
grep tune $OUT/tune_one_token_13to24.log
