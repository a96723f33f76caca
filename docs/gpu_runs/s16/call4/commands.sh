#!/usr/bin/env bash
# session 16, call 4: MTP batch 32's union sizes as built on the GPU (to correlate with call 3's CTA ends); one-token split sweeps at batch 4-11 (main)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
python3 tmp_union.py > $OUT/union_sizes.log 2>&1
cat $OUT/union_sizes.log
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so TUNE_SETS=4 TUNE_CASES=4x1,5x1,6x1,7x1 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=3,4,5,6 > $OUT/tune_splits_4to7.log 2>&1
grep tune $OUT/tune_splits_4to7.log
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so TUNE_SETS=4 TUNE_CASES=8x1,9x1,10x1,11x1 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=2,3,4 > $OUT/tune_splits_8to11.log 2>&1
grep tune $OUT/tune_splits_8to11.log
