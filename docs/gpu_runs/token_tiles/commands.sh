#!/usr/bin/env bash
# The commands behind this folder's logs (H200, 93b751a's build carried).
export PYTHONPATH=python FLASHMSA_LIBRARY=build-gpu/libflashmsa.so
python3 -m pytest tests/gpu/test_gpu_token_tiles.py -q --maxfail=15   # tests_summary.log
python3 -m bench.prefill --quick --sizes 8192,32768,131072 --impls msa,sdpa_cudnn --production-impls msa,sdpa_cudnn   # union_tile.log
python3 -m bench.prefill --quick --sizes 8192,32768,131072 --impls msa --production-impls msa --launch-overrides token_tiles=1   # token_tiles.log
