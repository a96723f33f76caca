# s24 call 6: next/warm-plan-parameters (build-ab/warmplan.so) against main 0cf5fdb (build-ab/prep.so), two rounds; then the one-token GPU tests on it
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 170 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 80 0cf5fdb=build-ab/prep.so warmplan=build-ab/warmplan.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd
FLASHMSA_LIBRARY=build-ab/warmplan.so timeout 150 python3 -m pytest tests/gpu/test_gpu_one_token.py -q -x -rs > $OUT/tests_warmplan.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests_warmplan.log
