# s25 call 5: the batch 1 and 16 floor rows again, now also launched with programmatic dependent launch as the library launches decode (gather_ceiling.cu rows "... pdl"), then main's kernels (build-ab/prep.so = 0cf5fdb) in the quick decode benchmark on the same machine, one round
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 200 build-probe/gather_ceiling 3 "b1 split16 none" "b16 split2 none" > $OUT/gather_ceiling.log 2>&1; echo "probe rc=$?"; cat $OUT/gather_ceiling.log
timeout 100 python3 scripts/ab_decode.py --out $OUT/abd --rounds 1 --timeout 70 0cf5fdb=build-ab/prep.so > $OUT/ab_decode.log 2>&1; tail -9 $OUT/ab_decode.log; rm -rf $OUT/abd
