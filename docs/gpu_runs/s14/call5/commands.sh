#!/usr/bin/env bash
# session 14, call 5: suite and decode A/B of d09cc81 (two CTAs per SM for every decode grid); MTP on the one-consumer shape (measurement knob, build-ab/decode-like.so = d09cc81 + FLASHMSA_TUNE_DECODE_LIKE)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/decode-like.so TUNE_SETS=2 TUNE_CASES=32x8,64x8,16x8 timeout 120 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_DECODE_LIKE=1 > $OUT/tune_mtp_decode_like.log 2>&1
grep tune $OUT/tune_mtp_decode_like.log
FLASHMSA_LIBRARY=build-ab/two-per-sm.so timeout 285 python3 -m pytest tests/gpu -q -rs > $OUT/suite.log 2>&1
tail -3 $OUT/suite.log
timeout 200 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 80 main=build-ab/main.so new=build-ab/two-per-sm.so > $OUT/ab_decode.log 2>&1
tail -12 $OUT/ab_decode.log
rm -rf $OUT/abd/*/
