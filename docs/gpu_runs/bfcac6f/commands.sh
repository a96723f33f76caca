# The GPU suite's quantized-K/V, one-token and per-token decode files and the decode benchmark at
# bfcac6f (kernels SASS-identical to 4e06718's). H200; library built here with
# scripts/build_gpu.sh and carried.
export FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python
o=${OUT:-out}
timeout 220 python3 -m pytest -q tests/gpu/test_gpu_fp8_kv.py tests/gpu/test_gpu_nvfp4_kv.py > $o/tests.log 2>&1
timeout 90 python3 -m pytest -q tests/gpu/test_gpu_one_token.py >> $o/tests.log 2>&1
timeout 60 python3 -m pytest -q tests/gpu/test_gpu_fp8_token_scales.py -k "one-token or decode-kernel or union-tile" >> $o/tests.log 2>&1
grep -E "passed|failed|FAILED|Error" $o/tests.log
timeout 120 python3 -m bench.decode --quick --kv-dtype all > $o/decode_all.log 2>&1
grep -E "weighted|b64_kv32768|mtp8" $o/decode_all.log
