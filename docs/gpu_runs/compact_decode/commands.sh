# One call on the H200 (build-gpu/libflashmsa.so of the commit carried):
export FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python
timeout 280 python3 -m pytest -q tests/gpu/test_gpu_fp8_kv.py tests/gpu/test_gpu_nvfp4_kv.py \
  tests/gpu/test_gpu_quantized_kv.py tests/gpu/test_gpu_one_token.py > gpu_tests_fp8_nvfp4.log
python3 -m bench.decode --quick --kv-dtype all > decode_all.log
python3 -m bench.decode --quick --kv-dtype all --launch-overrides decode_kernel=2 \
  > decode_all_decode_kernel_2.log
# The warp-block experiment (56d12a0), one call:
timeout 200 python3 -m pytest -q -x tests/gpu/test_gpu_fp8_kv.py \
  -k "decode or one_token or multi_row or e4m3 or graph" tests/gpu/test_gpu_nvfp4_kv.py \
  > gpu_tests_warp_blocks.log
python3 -m bench.decode --quick --kv-dtype all > decode_all_warp_blocks.log
python3 -m bench.decode --quick --kv-dtype all --launch-overrides warp_blocks=0 \
  > decode_all_routing.log
# ed4be16, three calls:
timeout 330 python3 -m pytest -q tests/gpu/test_gpu_fp8_token_scales.py \
  tests/gpu/test_gpu_vllm_integration.py tests/gpu/test_gpu_token_warps.py \
  tests/gpu/test_gpu_causal_entry_limit.py \
  "tests/gpu/test_gpu_fp8_kv.py::test_one_token_kernel_for_multi_row_requests" \
  "tests/gpu/test_gpu_fp8_kv.py::test_multi_row_requests_forced" \
  "tests/gpu/test_gpu_fp8_kv.py::test_decode" > gpu_tests_routing_ed4be16.log
python3 -m bench.decode --quick --kv-dtype all > decode_all_ed4be16.log
python3 -m bench.vllm_entry --quick > vllm_entry_ed4be16.log
# NVFP4 V in registers, one call:
python3 -m bench.decode --quick --kv-dtype all > decode_all_nvfp4_v_in_registers.log
timeout 150 python3 -m pytest -q tests/gpu/test_gpu_nvfp4_kv.py tests/gpu/test_gpu_quantized_kv.py \
  > gpu_tests_nvfp4_v_in_registers.log
