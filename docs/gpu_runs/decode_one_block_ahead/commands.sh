# Decode with the NVFP4 consumer one block ahead on K, and what bounds fp8 and NVFP4 decode; the
# fp8 prefill of the converter-warp union tile against token warps. H200; library built here
# with scripts/build_gpu.sh and carried (build-gpu/libflashmsa.so).
export FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python
# d27bb6f (before this work): tests_d27bb6f.log, prefill_fp8_*.log
python3 -m pytest -q tests/gpu/test_gpu_nvfp4_kv.py tests/gpu/test_gpu_token_warps.py \
    tests/gpu/test_gpu_fp8_token_scales.py -k "group_sizes or paths"
python3 -m bench.prefill --quick --kv-dtype fp8 --impls msa --production-impls msa            # token warps
python3 -m bench.prefill --quick --kv-dtype fp8 --impls msa --production-impls msa \
    --launch-overrides token_warps=0                                                           # converter union tile
# b256eea (fp8 and NVFP4 one block ahead on K): decode_all_b256eea.log, tests_b256eea.log
python3 -m bench.decode --quick --kv-dtype all
python3 -m pytest -q tests/gpu/test_gpu_fp8_token_scales.py -k "one-token or decode-kernel or union-tile"
python3 -m pytest -q tests/gpu/test_gpu_fp8_kv.py tests/gpu/test_gpu_nvfp4_kv.py
python3 -m pytest -q tests/gpu/test_gpu_one_token.py
# ncu_decode_b64_*.txt: hardware counters of one batch-64 call (scripts/profile.sh decode)
PROFILE_KV=fp8 scripts/profile.sh decode; PROFILE_KV=nvfp4 scripts/profile.sh decode
# stall_reasons_decode_b64_nvfp4.txt: the warp-state samples of source_decode.csv summed by reason
PROFILE_KV=nvfp4 scripts/profile.sh decode --source
