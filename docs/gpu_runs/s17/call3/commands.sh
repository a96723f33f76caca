#!/usr/bin/env bash
# session 17, call 3: balanced MTP with warp 0 announcing converged (76a24f1 on tried/balance-clusters, build-ab/balance2.so): progress diagnostic, one test case, the balance tests, the cluster sweep, decode A/B against main16
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
N=build-ab/balance2.so
FLASHMSA_TUNE_BALANCE=2 FLASHMSA_LIBRARY=build-ab/balance2-debug.so timeout 30 python3 scripts/balance_debug.py 32 > $OUT/debug_c2.log 2>&1; head -30 $OUT/debug_c2.log
grep -q finished $OUT/debug_c2.log || exit 0
FLASHMSA_LIBRARY=$N timeout 240 python3 -m pytest -q tests/gpu/test_gpu_balance.py > $OUT/balance_tests.log 2>&1; tail -15 $OUT/balance_tests.log
FLASHMSA_LIBRARY=$N TUNE_SETS=3 TUNE_CASES=32x8,24x8,28x8 timeout 90 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_BALANCE=1,2 > $OUT/tune_balance.log 2>&1; grep tune $OUT/tune_balance.log | tail -12
timeout 100 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 main=build-ab/main16.so balance=$N > $OUT/ab_decode.log 2>&1; tail -12 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
