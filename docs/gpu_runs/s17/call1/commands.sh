#!/usr/bin/env bash
# session 17, call 1: balanced MTP (1fafac0 on tried/balance-clusters, build-ab/balance1.so; it hung): one GPU test case, the cluster-size sweep at MTP batch 24-32, the balance tests, decode A/B against main16 (ef8e2de's kernels)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
N=build-ab/balance1.so
FLASHMSA_LIBRARY=$N timeout 60 python3 -m pytest -q -x tests/gpu/test_gpu_balance.py -k "b32-long and 2" > $OUT/balance_smoke.log 2>&1; tail -5 $OUT/balance_smoke.log
FLASHMSA_LIBRARY=$N TUNE_SETS=3 TUNE_CASES=32x8,24x8,28x8 timeout 90 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_BALANCE=1,2,4 > $OUT/tune_balance.log 2>&1; grep tune $OUT/tune_balance.log | tail -12
FLASHMSA_LIBRARY=$N timeout 200 python3 -m pytest -q tests/gpu/test_gpu_balance.py > $OUT/balance_tests.log 2>&1; tail -15 $OUT/balance_tests.log
timeout 100 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 main=build-ab/main16.so balance=$N > $OUT/ab_decode.log 2>&1; tail -12 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
