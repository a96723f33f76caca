# s25 call 2: next/short-chains (build-ab/chains.so = the branch's first commit): the whole GPU suite, then a 3-round A/B against main (build-ab/prep.so = 0cf5fdb, main's kernels)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/chains.so BUDGET=400 TESTS_TIMEOUT=390 OUT=$OUT/suite scripts/gpu_check.sh tests > $OUT/suite.log 2>&1; tail -4 $OUT/suite.log
timeout 200 python3 scripts/ab_decode.py --out $OUT/abd --rounds 3 --timeout 60 0cf5fdb=build-ab/prep.so chains=build-ab/chains.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd
