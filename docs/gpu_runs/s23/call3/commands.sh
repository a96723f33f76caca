# s23 call 3: A/B of main (0b278a5), ool = tried/search-out-of-line (0e814c0: the request search a noinline call), early-ool = tried/early-ool (5acdff5: both); timeline and ncu profile of ool
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
timeout 330 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 100 main=build-ab/main.so ool=build-ab/ool.so early-ool=build-ab/early-ool.so > $OUT/ab_decode.log 2>&1; tail -12 $OUT/ab_decode.log; rm -rf $OUT/abd
FLASHMSA_LIBRARY=build-ab/ool-timeline.so TIMELINE_CASES=1x1,64x1 timeout 60 python3 scripts/timeline.py > $OUT/timeline.log 2>&1; grep -v "^  cta" $OUT/timeline.log | grep -E "call|located|planned|k_issued|first_k|loop |end " 
mkdir -p $OUT/p1
FLASHMSA_LIBRARY=build-ab/ool.so OUT=$OUT/p1 timeout 100 scripts/profile.sh decode1 --source > /dev/null 2>&1
gzip $OUT/p1/*.csv
