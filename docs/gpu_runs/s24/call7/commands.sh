# s24 call 7: next/warm-plan-parameters (build-ab/warmplan.so; every non-decode kernel's SASS identical to main 0cf5fdb): the decode GPU tests (the one-token ones passed in call 6)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/warmplan.so timeout 200 python3 -m pytest tests/gpu/test_gpu_decode.py -q -x -rs > $OUT/tests_warmplan_decode.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests_warmplan_decode.log
