#!/usr/bin/env bash
# session 18, call 7: 783c717 (build-gpu = build-ab/own-mask.so): the suite's files that call6's 250 s cap cut (one_token, quantized_kv; call6 passed 232 before it), then two more decode A/B rounds against main18 (767f7f9)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so timeout 150 python3 -m pytest -q tests/gpu/test_gpu_one_token.py tests/gpu/test_gpu_quantized_kv.py > $OUT/tests_rest.log 2>&1; tail -2 $OUT/tests_rest.log
timeout 120 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 mask=build-gpu/libflashmsa.so main=build-ab/main18.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
