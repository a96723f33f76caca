#!/usr/bin/env bash
# session 17, call 4: balanced MTP 6fa2caa on tried/balance-clusters (build-ab/balance3.so): where its time goes (no tails: MIN_TAIL=128; slack 4, 8; off), and the b20 mixed-rows and determinism tests
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
N=build-ab/balance3.so
FLASHMSA_LIBRARY=$N TUNE_SETS=3 TUNE_CASES=32x8,24x8 timeout 100 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_BALANCE_MIN_TAIL=128 FLASHMSA_TUNE_BALANCE_SLACK=4,8 FLASHMSA_TUNE_BALANCE=1 > $OUT/tune_balance.log 2>&1; grep tune $OUT/tune_balance.log | tail -14
FLASHMSA_LIBRARY=$N timeout 150 python3 -m pytest -q -x tests/gpu/test_gpu_balance.py -k "b20 or deterministic" > $OUT/balance_tests.log 2>&1; tail -15 $OUT/balance_tests.log
