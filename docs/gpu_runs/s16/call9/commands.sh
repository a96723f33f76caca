#!/usr/bin/env bash
# session 16, call 9: MTP batch 32 at equal union sizes against the random selection (scripts/mtp_balance.py): the ceiling of balancing its CTAs' work; main 86ffd1b's library
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so timeout 150 python3 scripts/mtp_balance.py --batch 32 --sets 4 > $OUT/mtp_balance.log 2>&1
cat $OUT/mtp_balance.log
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so timeout 100 python3 scripts/mtp_balance.py --batch 8 --sets 4 > $OUT/mtp_balance_b8.log 2>&1
tail -4 $OUT/mtp_balance_b8.log
