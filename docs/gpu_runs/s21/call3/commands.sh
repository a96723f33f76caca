#!/usr/bin/env bash
# session 21, call 3: main (19d0f3d kernels = build-ab/main20b.so): one-token grids in two or more waves of split units merged through the workspace (FLASHMSA_TUNE_CLUSTER=0: no cluster, the merge kernel), so that the block scheduler balances the SMs' unequal bandwidth shares as at batch 128
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/main20b.so FLASHMSA_TUNE_CLUSTER=0 TUNE_SETS=3 TUNE_CASES=64x1,64x1x131072,128x1,16x1,32x1 timeout 200 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=2,3,4 > $OUT/tune_workspace_splits.log 2>&1; grep tune $OUT/tune_workspace_splits.log; tail -3 $OUT/tune_workspace_splits.log
FLASHMSA_LIBRARY=build-ab/main20b.so TUNE_SETS=3 TUNE_CASES=64x1,128x1 timeout 100 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=2 > $OUT/tune_cluster_splits.log 2>&1; grep tune $OUT/tune_cluster_splits.log
