export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 400 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 110 main=build-ab/few-rows.so new=build-ab/no-promotion.so > $OUT/ab_decode.log 2>&1; tail -14 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
