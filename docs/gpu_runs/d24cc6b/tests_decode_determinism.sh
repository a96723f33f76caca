# s25 call 7: next/wait-in-role (build-ab/waitrole.so, 38d…: decode kernel only differs from main) the decode and determinism GPU tests (the one-token file passed in call 6)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/waitrole.so timeout 250 python3 -m pytest tests/gpu/test_gpu_decode.py tests/gpu/test_gpu_determinism.py -q -x -rs > $OUT/tests_waitrole_decode.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests_waitrole_decode.log
