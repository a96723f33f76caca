#!/usr/bin/env bash
# session 15, call 1: suite on next/throttle (75cd895, throttle.so; also covers main's re-formed deep-pipeline test); throttle sweeps; short-KV DECODE_LIKE sweep on main (main15.so = ac4ae55)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
T=build-ab/throttle.so
FLASHMSA_LIBRARY=$T timeout 285 python3 -m pytest tests/gpu -q -rs > $OUT/suite.log 2>&1
tail -3 $OUT/suite.log
FLASHMSA_LIBRARY=$T TUNE_SETS=2 TUNE_CASES=8x8,32x8,64x8,128x8 timeout 80 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_THROTTLE=1,2 > $OUT/tune_mtp_throttle.log 2>&1
grep tune $OUT/tune_mtp_throttle.log
FLASHMSA_LIBRARY=$T FLASHMSA_TUNE_DEEP_PIPELINE=1 TUNE_SETS=4 TUNE_CASES=16x1,32x1 timeout 50 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_THROTTLE=1,2 > $OUT/tune_deep_throttle.log 2>&1
grep tune $OUT/tune_deep_throttle.log
FLASHMSA_LIBRARY=$T FLASHMSA_TUNE_CTAS_PER_SM=1 FLASHMSA_TUNE_STAGES=2 TUNE_SETS=2 TUNE_CASES=64x1,128x1 timeout 50 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_THROTTLE=1,2 > $OUT/tune_one_cta_throttle.log 2>&1
grep tune $OUT/tune_one_cta_throttle.log
FLASHMSA_LIBRARY=build-ab/main15.so TUNE_SETS=2 TUNE_CASES=32x8x1000,64x8x1000,128x8x1000,128x8x4000,64x8x5000 timeout 80 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_DECODE_LIKE=1 > $OUT/tune_short_kv.log 2>&1
grep tune $OUT/tune_short_kv.log
