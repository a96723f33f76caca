# s25 call 1: next/warm-plan-parameters (build-ab/warmplan.so = 4cab186) the whole GPU suite, then a 3-round A/B against main (build-ab/prep.so = 0cf5fdb, main b4a9e3c's kernels)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/warmplan.so BUDGET=400 TESTS_TIMEOUT=390 OUT=$OUT/suite scripts/gpu_check.sh tests > $OUT/suite.log 2>&1; tail -4 $OUT/suite.log
timeout 190 python3 scripts/ab_decode.py --out $OUT/abd --rounds 3 --timeout 60 0cf5fdb=build-ab/prep.so warmplan=build-ab/warmplan.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd
