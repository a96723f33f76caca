# s23 call 6: A/B of main (0b278a5) against trigger-entry = tried/trigger-at-entry (f1f7ab1: griddepcontrol.launch_dependents at kernel entry), with the low-latency rows
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 400 python3 scripts/ab_decode.py --low-latency --out $OUT/abd --rounds 2 --timeout 150 main=build-ab/main.so trigger-entry=build-ab/trigger-entry.so > $OUT/ab_decode.log 2>&1; tail -30 $OUT/ab_decode.log; rm -rf $OUT/abd
