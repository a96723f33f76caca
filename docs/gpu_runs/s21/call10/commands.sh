#!/usr/bin/env bash
# session 21, call 10: branch tried/two-token-tiles (build-ab/tile-tokens.so: main + FLASHMSA_TUNE_TILE_TOKENS, host only): multi-token prediction at batch 5-16 with tiles of fewer tokens (1 or 2 tokens a warpgroup), on the one-consumer shape (FLASHMSA_TUNE_DECODE_LIKE=1) and on the two-consumer kernel
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
C=8x8x4000,8x8x10000,8x8x100000,8x8x200000,5x8x4000,16x8x4000,16x8x100000
FLASHMSA_LIBRARY=build-ab/tile-tokens.so FLASHMSA_TUNE_DECODE_LIKE=1 TUNE_SETS=3 TUNE_CASES=$C timeout 200 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_TILE_TOKENS=2,1 > $OUT/tune_decode_like_tiles.log 2>&1; grep tune $OUT/tune_decode_like_tiles.log; tail -2 $OUT/tune_decode_like_tiles.log
FLASHMSA_LIBRARY=build-ab/tile-tokens.so TUNE_SETS=3 TUNE_CASES=$C timeout 200 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_TILE_TOKENS=2,1 > $OUT/tune_two_consumer_tiles.log 2>&1; grep tune $OUT/tune_two_consumer_tiles.log; tail -2 $OUT/tune_two_consumer_tiles.log
