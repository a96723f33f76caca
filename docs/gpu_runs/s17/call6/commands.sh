#!/usr/bin/env bash
# session 17, call 6: balanced MTP with the announce off the start path and the producer's read one step later (5021a6e on tried/balance-clusters, build-ab/balance4.so: failed, see tune_balance.log): default, no tails, slack 4/8, off; batch 32 and 24
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
N=build-ab/balance4.so
FLASHMSA_LIBRARY=$N TUNE_SETS=3 TUNE_CASES=32x8,24x8 timeout 120 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_BALANCE_MIN_TAIL=128 FLASHMSA_TUNE_BALANCE_SLACK=4,8 FLASHMSA_TUNE_BALANCE=1 > $OUT/tune_balance.log 2>&1; grep tune $OUT/tune_balance.log | tail -14
