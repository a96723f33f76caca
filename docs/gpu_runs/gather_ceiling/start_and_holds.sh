export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/no-promotion.so timeout 200 python3 -m pytest tests/gpu/test_gpu_one_token.py tests/gpu/test_gpu_quantized_kv.py -q -rs 2>&1 | tee $OUT/gpu_tests_rest.log | tail -3
FLASHMSA_LIBRARY=build-ab/no-promotion-timeline.so TIMELINE_CASES=64x1,64x1x131072,16x1 timeout 120 python3 scripts/timeline.py > $OUT/timeline.log 2>&1; grep -v "^  cta" $OUT/timeline.log | grep -E "call|first_k|last_k|loop|end|corr|k_issued|planned"
timeout 150 build-probe/gather_ceiling 3 2>&1 | tee $OUT/gather_ceiling.log | grep -E "none|bulk\b"
