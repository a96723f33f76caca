#!/usr/bin/env bash
# session 20, call 2: probes on main's kernels (00d8393 = build-ab/main20.so) and the parent of the warp skip (4968893 = build-ab/topk-divisor.so): MTP throttle sweep at 32x8 / 24x8 / 16x8 (rotating inputs, 3 sets), one-token split counts at batch 64 / 128 / KV 131072
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
for n in main20 topk-divisor; do
  FLASHMSA_LIBRARY=build-ab/$n.so TUNE_SETS=3 TUNE_CASES=32x8,24x8,16x8 timeout 100 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_THROTTLE=1,2 > $OUT/tune_throttle_$n.log 2>&1; echo "== $n"; grep tune $OUT/tune_throttle_$n.log
done
FLASHMSA_LIBRARY=build-ab/main20.so TUNE_SETS=3 TUNE_CASES=64x1,128x1,64x1x131072 timeout 150 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=2,1 > $OUT/tune_splits.log 2>&1; echo "== splits"; grep tune $OUT/tune_splits.log
