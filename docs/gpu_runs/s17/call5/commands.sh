#!/usr/bin/env bash
# session 17, call 5: the cost of the cluster launch alone: MTP at batch 32 and 24 with balancing off (FLASHMSA_TUNE_BALANCE=1), launched plainly and as clusters of 2 (FLASHMSA_DEBUG_CLUSTER_ONLY=2: 6fa2caa on tried/balance-clusters plus a launch-side hack, not kept, build-ab/balance3-clusteronly.so)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
N=build-ab/balance3-clusteronly.so
FLASHMSA_TUNE_BALANCE=1 FLASHMSA_LIBRARY=$N TUNE_SETS=3 TUNE_CASES=32x8,24x8 timeout 100 python3 scripts/kernel_smoke.py --tune FLASHMSA_DEBUG_CLUSTER_ONLY=2,1 > $OUT/tune_cluster_only.log 2>&1; grep tune $OUT/tune_cluster_only.log | tail -10
