#!/usr/bin/env bash
# The commands behind this folder's logs (H200, build-gpu carried; FLASHMSA_LIBRARY=build-gpu/libflashmsa.so).
export PYTHONPATH=python
B="python3 -m bench.prefill --quick --sizes 8192,32768 --impls msa --production-impls msa --kv-dtype fp8"
# placed_conversion.log (e257c73, with --sizes 8192,32768,131072), signed_conversion.log (the sign-mode conversion)
$B --launch-overrides token_warps=1
# probe_no_conversion.log: the same kernel built with e4m3_placed_pair returning its input (results wrong)
FLASHMSA_LIBRARY=build-probe/libflashmsa.so $B --launch-overrides token_warps=1
# placed_conversion_two_stages.log, union_tile_fp8.log
$B --launch-overrides token_warps=1,prefill_stages=2
$B --launch-overrides token_warps=0
# prefill_fp8_default_d4f6644.log
$B
# decode_fp8_union.log, decode_fp8_token_warps.log
for tw in 0 1; do python3 -m bench.decode --quick --kv-dtype fp8 --launch-overrides token_warps=$tw; done
# gpu_tests_d4f6644_part1.log (cut at 260 s after 353 tests, all passed), _part2.log
python3 -m pytest tests/gpu/test_gpu_token_warps.py tests/gpu/test_gpu_fp8_kv.py tests/gpu/test_gpu_vllm_integration.py tests/gpu/test_gpu_causal_entry_limit.py -q
python3 -m pytest tests/gpu/test_gpu_fp8_kv.py tests/gpu/test_gpu_vllm_integration.py tests/gpu/test_gpu_causal_entry_limit.py -q
