#!/usr/bin/env bash
# session 19, call 5: 31d89ea (build-gpu): the file call4 did not reach before its cap
export PYTHONPATH=python:scripts; FLASHMSA_LIBRARY=build-gpu/libflashmsa.so timeout 100 python3 -m pytest -q tests/gpu/test_gpu_quantized_kv.py > $OUT/tests_rest.log 2>&1; tail -3 $OUT/tests_rest.log
