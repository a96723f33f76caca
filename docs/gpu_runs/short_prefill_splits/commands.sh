# On the H200, one call, 0fdd84f's library (kernels identical to 13d48fb's): the production
# cases (and M3 8K random) with the split count, or the one-consumer shape, overridden.
export PYTHONPATH=python PYTHONUNBUFFERED=1 FLASHMSA_LIBRARY=build-gpu/base/libflashmsa.so
for o in splits=1 splits=2 splits=3 splits=4 one_consumer=1 one_consumer=1,splits=2; do
  python3 -m bench.prefill --quick --sizes 8192 --patterns random --impls msa \
    --production-impls msa,sdpa_cudnn --launch-overrides $o
done  # s1.log s2.log s3.log s4.log one_consumer.log one_consumer_s2.log
