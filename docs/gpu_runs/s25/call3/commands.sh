# s25 call 3: floors of batch 1 and 16 (scripts/gather_ceiling.cu's rows "b1 split16 none*", "b16 split2 none*": the kernel's reads with math holds and starts of 0 / 0.5 / 1 / 2 us), then main's kernels (build-ab/prep.so = 0cf5fdb) in the quick decode benchmark on the same machine, two rounds
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 200 build-probe/gather_ceiling 3 "b1 split16 none" "b16 split2 none" > $OUT/gather_ceiling.log 2>&1; echo "probe rc=$?"; cat $OUT/gather_ceiling.log
timeout 150 python3 scripts/ab_decode.py --low-latency --out $OUT/abd --rounds 2 --timeout 70 0cf5fdb=build-ab/prep.so > $OUT/ab_decode.log 2>&1; tail -12 $OUT/ab_decode.log; rm -rf $OUT/abd
