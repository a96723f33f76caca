# s25 call 6: next/wait-in-role (build-ab/waitrole.so; every non-decode kernel's SASS identical to main's) against main 0cf5fdb (build-ab/prep.so), two rounds with the low-latency rows; then the one-token GPU tests on it
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 190 python3 scripts/ab_decode.py --low-latency --out $OUT/abd --rounds 2 --timeout 80 0cf5fdb=build-ab/prep.so waitrole=build-ab/waitrole.so > $OUT/ab_decode.log 2>&1; tail -22 $OUT/ab_decode.log; rm -rf $OUT/abd
FLASHMSA_LIBRARY=build-ab/waitrole.so timeout 150 python3 -m pytest tests/gpu/test_gpu_one_token.py -q -x -rs > $OUT/tests_waitrole.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests_waitrole.log
