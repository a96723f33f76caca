# On the H200, build-gpu/libflashmsa.so built here and carried; "before" is 0fdd84f's library
# (build-gpu/base/, kernels identical to 13d48fb's), measured in the same call.
export PYTHONPATH=python PYTHONUNBUFFERED=1
# 4734eac (the early key-scale reads), one call: vllm_entry_before.log, vllm_entry.log
FLASHMSA_LIBRARY=build-gpu/base/libflashmsa.so python3 -m bench.vllm_entry --quick > vllm_entry_before.log
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so python3 -m bench.vllm_entry --quick > vllm_entry.log
# fbea9ec (the short-prefill split rule without its 256-block bound), one call
FLASHMSA_LIBRARY=build-gpu/base/libflashmsa.so python3 -m bench.prefill --quick --sizes 8192 \
  --patterns random --impls msa --production-impls msa > prefill_before.log
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so python3 -m bench.prefill --quick --sizes 8192,32768,131072 \
  --impls msa,sdpa_cudnn --production-impls msa,sdpa_cudnn > prefill.log
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so python3 -m pytest -q tests/gpu/test_gpu_fp8_kv.py \
  tests/gpu/test_gpu_causal_entry_limit.py tests/gpu/test_gpu_vllm_integration.py \
  tests/gpu/test_gpu_fp8_token_scales.py > gpu_tests_a_fbea9ec.log
# af5f37c, three calls
export FLASHMSA_LIBRARY=build-gpu/libflashmsa.so
python3 -m pytest -q tests/gpu/test_gpu_contract.py tests/gpu/test_gpu_layouts.py \
  tests/gpu/test_gpu_determinism.py tests/gpu/test_gpu_merge_attention_states.py \
  "tests/gpu/test_gpu_fp8_token_scales.py::test_path_takes_its_kernel" \
  tests/gpu/test_gpu_large.py > gpu_tests_b.log
python3 -m pytest -q tests/gpu/test_gpu_int32_limits.py tests/gpu/test_gpu_quantized_kv.py \
  tests/gpu/test_gpu_build.py > gpu_tests_c.log
timeout 165 python3 -m pytest -q tests/gpu/test_gpu_one_token.py tests/gpu/test_gpu_decode.py \
  > gpu_tests_d.log  # cut by its time limit after 96 of 103 tests, all passed
