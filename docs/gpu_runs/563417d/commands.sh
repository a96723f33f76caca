# The GPU suite and the benchmarks on 563417d (launch plan; kernels' SASS identical to d8ded73),
# one call on the H200, build-gpu/libflashmsa.so built here and carried.
export FLASHMSA_LIBRARY=build-gpu/libflashmsa.so FLASHMSA_COMMIT=563417d PYTHONPATH=python PYTHONUNBUFFERED=1
BUDGET=330 scripts/gpu_check.sh tests > $OUT/check.log 2>&1
timeout 100 python3 -m bench.decode --quick --out $OUT/dec > $OUT/decode.log 2>&1
timeout 150 python3 -m bench.prefill --quick --sizes 8192,32768,131072 --impls msa,sdpa_cudnn \
  --production-impls msa,sdpa_cudnn --out $OUT/pre > $OUT/prefill.log 2>&1
