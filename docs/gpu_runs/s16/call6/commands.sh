#!/usr/bin/env bash
# session 16, call 6: next/union-throttle (FLASHMSA_TUNE_BIG_UNION=n / _THROTTLE=t): its test; MTP batch 32 sweep of n at t = 0 and 1
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
L=build-ab/union-throttle.so
FLASHMSA_LIBRARY=$L timeout 60 python3 -m pytest -q -rs tests/gpu/test_gpu_decode.py -k "big_union" > $OUT/big_union_tests.log 2>&1
tail -3 $OUT/big_union_tests.log
for t in 0 1; do
  FLASHMSA_TUNE_BIG_UNION_THROTTLE=$t FLASHMSA_LIBRARY=$L TUNE_SETS=4 TUNE_CASES=32x8 timeout 80 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_BIG_UNION=94,98,101,104 > $OUT/tune_big_union_t$t.log 2>&1
  grep tune $OUT/tune_big_union_t$t.log | sed "s/^/t=$t /"
done
FLASHMSA_TUNE_BIG_UNION_THROTTLE=0 FLASHMSA_LIBRARY=$L TUNE_SETS=4 TUNE_CASES=32x8x100000,32x8x8000 timeout 80 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_BIG_UNION=60,90,100,110 > $OUT/tune_big_union_kv.log 2>&1
grep tune $OUT/tune_big_union_kv.log
