#!/usr/bin/env bash
# session 18, call 5: ncu source profile (warp-state samples per SASS instruction) of MTP batch 32 at 9074209 (build-ab/spec-warp1.so)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
export FLASHMSA_LIBRARY=build-ab/spec-warp1.so
mkdir -p $OUT/mtp
OUT=$OUT/mtp timeout 200 scripts/profile.sh mtp --source > /dev/null 2>&1
gzip $OUT/mtp/*.csv
ls -la $OUT/mtp; grep -E "Duration|DRAM Throughput|Stall|Warp Cycles" $OUT/mtp/ncu_mtp.txt | head -20
