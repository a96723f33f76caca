# s23 call 7: A/B of main (0b278a5), trigger-late = tried/trigger-late (2c6222e: launch_dependents when each warp's work is done), trigger-none = tried/trigger-none (56dba0b: none), with the low-latency rows
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 450 python3 scripts/ab_decode.py --low-latency --out $OUT/abd --rounds 2 --timeout 150 main=build-ab/main.so trigger-late=build-ab/trigger-late.so trigger-none=build-ab/trigger-none.so > $OUT/ab_decode.log 2>&1; tail -30 $OUT/ab_decode.log; rm -rf $OUT/abd
