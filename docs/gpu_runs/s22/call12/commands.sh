export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 200 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 60 main=build-ab/no-promotion.so touch=build-ab/param-touch.so > $OUT/ab_decode.log 2>&1; tail -14 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
