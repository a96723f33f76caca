#!/usr/bin/env bash
# session 17, call 11: the MTP tests call 10 did not reach within its timeout (evict-first for multi-token prediction, 5e487ee, build-gpu)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1; FLASHMSA_LIBRARY=build-gpu/libflashmsa.so timeout 75 python3 -m pytest -q tests/gpu/test_gpu_determinism.py tests/gpu/test_gpu_decode.py -k "(sorted and mtp) or (graph_replay and 8)" > $OUT/mtp_tests_rest.log 2>&1; tail -3 $OUT/mtp_tests_rest.log
