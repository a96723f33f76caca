#!/usr/bin/env bash
# session 16, call 5: next/small-batch-splits (host rule: one-token grids of short splits within 17/20 of the SMs): its test and the one-token tests; small-batch times against main in the same run (two alternations)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
N=build-ab/small-splits.so
FLASHMSA_LIBRARY=$N timeout 150 python3 -m pytest -q -rs tests/gpu/test_gpu_one_token.py > $OUT/one_token_tests.log 2>&1
tail -3 $OUT/one_token_tests.log
for round in 1 2; do
  for lib in main16 small-splits; do
    FLASHMSA_LIBRARY=build-ab/$lib.so TUNE_SETS=3 TUNE_CASES=1x1,2x1,3x1,4x1,5x1,6x1,7x1,8x1,9x1,10x1,11x1,12x1,16x1 timeout 80 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPECULATE=1 > $OUT/small_${lib}_$round.log 2>&1
    grep "default" $OUT/small_${lib}_$round.log | sed "s/^/$lib r$round /"
  done
done
