# s24 call 4: next/push-prepared with the owners' wait fix (build-ab/prep.so): the whole GPU suite, then an A/B against main (build-ab/main.so = d3a9080's kernels) with the low-latency rows
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/prep.so BUDGET=400 TESTS_TIMEOUT=390 OUT=$OUT/suite scripts/gpu_check.sh tests > $OUT/suite.log 2>&1; tail -4 $OUT/suite.log
timeout 190 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 90 main=build-ab/main.so prep=build-ab/prep.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd
