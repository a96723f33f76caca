# 3e4c6cc on the H200, one call, build-gpu/libflashmsa.so built here and carried: the quick decode
# benchmark, the prefill benchmark (M3 at 8K/32K/128K per pattern and the 16 production cases,
# FlashMSA beside cuDNN dense attention of equal work), then the GPU suite.
export FLASHMSA_LIBRARY=build-gpu/libflashmsa.so FLASHMSA_COMMIT=3e4c6cc PYTHONPATH=python PYTHONUNBUFFERED=1
timeout 120 python3 -m bench.decode --quick --out $OUT/dec > $OUT/decode.log 2>&1
timeout 120 python3 -m bench.prefill --quick --sizes 8192,32768,131072 --impls msa,sdpa_cudnn \
  --production-impls msa,sdpa_cudnn --out $OUT/pre > $OUT/prefill.log 2>&1
BUDGET=420 TESTS_TIMEOUT=410 scripts/gpu_check.sh tests > $OUT/check.log 2>&1
