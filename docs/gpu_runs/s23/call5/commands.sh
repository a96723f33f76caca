# s23 call 5: A/B of main (0b278a5), search-loop = tried/search-loop (4b14179: one copy of the request words' code), ool = tried/search-out-of-line (0e814c0)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 300 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 100 main=build-ab/main.so search-loop=build-ab/search-loop.so ool=build-ab/ool.so > $OUT/ab_decode.log 2>&1; tail -12 $OUT/ab_decode.log; rm -rf $OUT/abd
