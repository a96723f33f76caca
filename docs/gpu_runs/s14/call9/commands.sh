#!/usr/bin/env bash
# session 14, call 9: e5a2f5e (likely-capped.so): batch 1-2 at 8 tokens back at 16 splits; full suite; decode A/B against main's 683a141 (main.so)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/likely-capped.so TUNE_SETS=4 TUNE_CASES=1x8,2x8,16x8 timeout 60 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPECULATE=1 > $OUT/tune_capped.log 2>&1
grep tune $OUT/tune_capped.log
FLASHMSA_LIBRARY=build-ab/likely-capped.so timeout 280 python3 -m pytest tests/gpu -q -rs > $OUT/suite.log 2>&1
tail -3 $OUT/suite.log
timeout 110 python3 scripts/ab_decode.py --out $OUT/abd --rounds 1 --timeout 80 main=build-ab/main.so new=build-ab/likely-capped.so > $OUT/ab_decode.log 2>&1
tail -10 $OUT/ab_decode.log
rm -rf $OUT/abd/*/
