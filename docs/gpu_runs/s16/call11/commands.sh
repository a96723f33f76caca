#!/usr/bin/env bash
# session 16, call 11: next/mtp-tiles-outer (host rule: tiles outermost for one-tile-per-request grids): decode A/B against main (two rounds), the knob on main's library, test_gpu_decode.py on the rule
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
N=build-ab/mtp-tiles-outer.so
timeout 100 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 main=build-ab/main16.so tiles_outer=$N > $OUT/ab_decode.log 2>&1
tail -10 $OUT/ab_decode.log
rm -rf $OUT/abd/*/
FLASHMSA_LIBRARY=build-ab/main16.so TUNE_SETS=3 TUNE_CASES=32x8,8x8,64x8,128x8x4000 timeout 50 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_TILES_OUTER=1 > $OUT/tune_tiles_outer.log 2>&1
grep tune $OUT/tune_tiles_outer.log
FLASHMSA_LIBRARY=$N timeout 95 python3 -m pytest -q -x tests/gpu/test_gpu_decode.py -k "test_decode_bf16 or unequal_rows or inflight_throttle or multi_round or (graph_replay and 64-8)" > $OUT/decode_tests.log 2>&1
tail -3 $OUT/decode_tests.log
