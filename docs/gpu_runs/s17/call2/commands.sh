#!/usr/bin/env bash
# session 17, call 2: diagnostic of the balanced MTP hang (1fafac0 on tried/balance-clusters with a progress-mark patch, build-ab/balance-debug.so: each CTA's stage in mapped host memory, scripts/balance_debug.py, not kept)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
for c in 2 4; do
FLASHMSA_TUNE_BALANCE=$c FLASHMSA_LIBRARY=build-ab/balance-debug.so timeout 40 python3 scripts/balance_debug.py 32 > $OUT/debug_c$c.log 2>&1; head -60 $OUT/debug_c$c.log
done
FLASHMSA_TUNE_BALANCE=2 FLASHMSA_TUNE_BALANCE_MIN_TAIL=128 FLASHMSA_LIBRARY=build-ab/balance-debug.so timeout 40 python3 scripts/balance_debug.py 32 > $OUT/debug_notail.log 2>&1; head -30 $OUT/debug_notail.log
