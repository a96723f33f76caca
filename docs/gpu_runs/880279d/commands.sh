# 880279d on the H200 (build-gpu/libflashmsa.so built here and carried). The fp8 K/V rows and the
# GPU suite ran at 880279d in one call; the bf16 rows ran at 770540c (prefill_bf16.log, an
# earlier build of the same native kernels; decode_bf16.log), whose bf16/fp16 kernels' SASS is
# identical to 880279d's function by function (cuobjdump, names normalised). The files named
# *_converter_warps, *_consumers_f2fp, *_f2fp are the fp8 designs 880279d replaced, measured the
# same way (commit messages of 770540c and 880279d).
export FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python
BUDGET=440 TESTS_TIMEOUT=430 scripts/gpu_check.sh tests > $OUT/check.log 2>&1
timeout -s KILL 45 python3 -m bench.decode --quick --kv-dtype fp8 --out /tmp/d8 > $OUT/decode_fp8.log 2>&1
timeout -s KILL 75 python3 -m bench.prefill --quick --kv-dtype fp8 --sizes 8192,32768,131072 \
  --impls msa --production-impls msa --out /tmp/p8 > $OUT/prefill_fp8.log 2>&1
# bf16 rows (770540c's call):
timeout -s KILL 60 python3 -m bench.decode --quick --out $OUT/d16 > $OUT/decode_bf16.log 2>&1
timeout -s KILL 90 python3 -m bench.prefill --quick --sizes 8192,32768,131072 --impls msa,sdpa_cudnn \
  --production-impls msa,sdpa_cudnn --out $OUT/p16 > $OUT/prefill_bf16.log 2>&1
