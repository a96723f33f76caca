# fp8 decode with three ring slots an operand (planning buffers in the Q region's free tail,
# test-only planning_in_q=1) beside the default; fp8 multi-token prediction on the union tile and
# token warps (decode_kernel=1, bf16's rule) beside the decode kernel; the GPU tests of the
# commits not yet run (4e06718: tests.log, decode_*.log). H200; library built here with
# scripts/build_gpu.sh and carried.
export FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python
o=${OUT:-out}
t() { timeout "$1" "${@:2}"; }
t 200 python3 -m pytest -q tests/gpu/test_gpu_nvfp4_kv.py -k decode > $o/tests.log 2>&1
for i in 1 2 3; do
  t 60 python3 -m pytest -q tests/gpu/test_gpu_fp8_token_scales.py -k union-tile >> $o/tests.log 2>&1
done
t 60 python3 -m pytest -q tests/gpu/test_gpu_fp8_kv.py -k planning_in_q >> $o/tests.log 2>&1
grep -E "passed|failed|FAILED|Error" $o/tests.log
t 150 python3 -m bench.decode --quick --kv-dtype all > $o/decode_all.log 2>&1
t 90 python3 -m bench.decode --quick --kv-dtype fp8 --launch-overrides planning_in_q=1 > $o/decode_fp8_planning_in_q.log 2>&1
t 90 python3 -m bench.decode --quick --kv-dtype fp8 --launch-overrides decode_kernel=1 > $o/decode_fp8_mtp_token_warps.log 2>&1
t 90 python3 -m bench.decode --quick --kv-dtype fp8 --launch-overrides decode_kernel=1,token_warps=0 > $o/decode_fp8_mtp_union_tile.log 2>&1
