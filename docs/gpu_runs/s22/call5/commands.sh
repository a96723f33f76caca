export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/no-promotion.so FLASHMSA_COMMIT=ca69aeb BUDGET=300 TESTS_TIMEOUT=290 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/suite.log 2>&1; tail -5 $OUT/suite.log
timeout 260 python3 scripts/ab_decode.py --low-latency --out $OUT/abd --rounds 1 --timeout 120 main=build-ab/few-rows.so new=build-ab/no-promotion.so > $OUT/ab_decode.log 2>&1; tail -30 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
