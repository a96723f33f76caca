#!/usr/bin/env bash
# session 14, call 8: split count from the likely tiles (likely-units.so = 9f.. on d09cc81) against d09cc81 (two-per-sm.so) on multi-token shapes; suite; decode A/B
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
export TUNE_SETS=4 TUNE_CASES=1x8,2x8,4x8,8x8,12x8,16x8,4x2,8x2,16x2,32x2,4x4,8x4,16x4,3x8
for lib in two-per-sm likely-units; do
  FLASHMSA_LIBRARY=build-ab/$lib.so timeout 100 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPECULATE=1 > $OUT/tune_$lib.log 2>&1
done
paste <(grep tune $OUT/tune_two-per-sm.log | awk '{print $2,$3,$4,$5,$6,$7}') <(grep tune $OUT/tune_likely-units.log | awk '{print $7}')
unset TUNE_SETS TUNE_CASES
FLASHMSA_LIBRARY=build-ab/likely-units.so timeout 285 python3 -m pytest tests/gpu -q -rs > $OUT/suite.log 2>&1
tail -3 $OUT/suite.log
timeout 150 python3 scripts/ab_decode.py --out $OUT/abd --rounds 1 --timeout 80 main=build-ab/main.so new=build-ab/likely-units.so > $OUT/ab_decode.log 2>&1
tail -10 $OUT/ab_decode.log
rm -rf $OUT/abd/*/
