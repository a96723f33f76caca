# The NVFP4 union tile (converter warps) on the H200; library built here with scripts/build_gpu.sh.
export FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python
# prefill_nvfp4_two_converter_warps.log (a681ecf), prefill_nvfp4_in_place.log (warps 1-3, in place),
# prefill_nvfp4_raw_ring_first.log (raw ring, before the per-thread chunk loop), each a call of its own:
python3 -m bench.prefill --quick --kv-dtype nvfp4 --out $OUT/pf
# one call at the raw ring with the chunk loop (the commit before the group-1 rule; kernels unchanged by it):
python3 -m pytest -q tests/gpu/test_gpu_nvfp4_kv.py tests/gpu/test_gpu_quantized_kv.py   # tests_nvfp4_quantized.log
python3 -m bench.prefill --quick --kv-dtype nvfp4 --out $OUT/pfn                         # prefill_nvfp4.log
python3 -m bench.prefill --quick --impls msa --production-impls msa --out $OUT/pfb      # prefill_bf16.log
python3 -m bench.decode --quick --kv-dtype all --out $OUT/dec                            # decode_all.log
