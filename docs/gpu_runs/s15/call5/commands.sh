#!/usr/bin/env bash
# session 15, call 5: the 15 tests call 4's suite did not reach (its timeout) on bitmap.so (8d519e0); MTP timeline with the bitmap plan (timeline build of 8d519e0); MTP stage/throttle tune
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
B=build-ab/bitmap.so
FLASHMSA_LIBRARY=$B timeout 150 python3 -m pytest -q -rs tests/gpu/test_gpu_one_token.py tests/gpu/test_gpu_quantized_kv.py -k "reduction_paths or multi_row_requests or quantized_kv" > $OUT/suite_rest.log 2>&1
tail -3 $OUT/suite_rest.log
FLASHMSA_LIBRARY=build-ab/timeline-bitmap.so TIMELINE_CASES=32x8,8x8 timeout 60 python3 scripts/timeline.py > $OUT/timeline.log 2>&1
grep -A22 "b32 t8 call 3" $OUT/timeline.log | head -24
FLASHMSA_LIBRARY=$B TUNE_SETS=2 TUNE_CASES=32x8 timeout 40 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_PREFILL_STAGES=3 FLASHMSA_TUNE_THROTTLE=1 > $OUT/tune_mtp_stages.log 2>&1
grep tune $OUT/tune_mtp_stages.log
