# s23 call 4: A/B of main (0b278a5) against early = tried/early-first-load (c8f8cfe), three rounds
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 400 python3 scripts/ab_decode.py --out $OUT/abd --rounds 3 --timeout 100 main=build-ab/main.so early=build-ab/early.so > $OUT/ab_decode.log 2>&1; tail -12 $OUT/ab_decode.log; rm -rf $OUT/abd
