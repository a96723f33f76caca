# b0037fe on the H200 (build-gpu/libflashmsa.so at b0037fe, build-main/libflashmsa.so at 5192414,
# both built here and carried), one call. decode_fp8_main.log is 5192414's library, the
# baseline of the register-path change; decode_bf16.log ran on b0037fe's library (its bf16
# kernels are 5192414's).
export PYTHONPATH=python; W=build-gpu/libflashmsa.so; M=build-main/libflashmsa.so
FLASHMSA_LIBRARY=$W timeout -s KILL 300 python3 -m pytest -q -x tests/gpu/test_gpu_fp8_kv.py \
  tests/gpu/test_gpu_vllm_integration.py tests/gpu/test_gpu_merge_attention_states.py > $OUT/tests_wip.log 2>&1
FLASHMSA_LIBRARY=$W timeout -s KILL 50 python3 -m bench.decode --quick --kv-dtype fp8 --out /tmp/dw > $OUT/decode_fp8_wip.log 2>&1
FLASHMSA_LIBRARY=$M timeout -s KILL 50 python3 -m bench.decode --quick --kv-dtype fp8 --out /tmp/dm > $OUT/decode_fp8_main.log 2>&1
FLASHMSA_LIBRARY=$W timeout -s KILL 60 python3 -m bench.decode --quick --out /tmp/db > $OUT/decode_bf16.log 2>&1
FLASHMSA_LIBRARY=$W timeout -s KILL 100 python3 -m bench.vllm_entry --quick > $OUT/vllm_entry.log 2>&1
