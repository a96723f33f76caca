# One call on the H200 (build-gpu/libflashmsa.so of the commit carried):
export FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python
timeout 280 python3 -m pytest -q tests/gpu/test_gpu_fp8_kv.py tests/gpu/test_gpu_nvfp4_kv.py \
  tests/gpu/test_gpu_quantized_kv.py tests/gpu/test_gpu_one_token.py > gpu_tests_fp8_nvfp4.log
python3 -m bench.decode --quick --kv-dtype all > decode_all.log
python3 -m bench.decode --quick --kv-dtype all --launch-overrides decode_kernel=2 \
  > decode_all_decode_kernel_2.log
