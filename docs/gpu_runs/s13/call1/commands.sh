# session 13, call 1 (libraries: build-ab/main-7e18e3b.so = main's kernels; owner-divisor = 6739dd1)
FLASHMSA_LIBRARY=build-ab/owner-divisor-timeline.so TIMELINE_CASES=1x1,16x1 python3 scripts/timeline.py > timeline_od.log
FLASHMSA_LIBRARY=build-ab/owner-divisor-timeline.so FLASHMSA_TUNE_SPLITS=16 TIMELINE_CASES=1x1 python3 scripts/timeline.py > timeline_od_s16.log
FLASHMSA_LIBRARY=build-ab/owner-divisor.so python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=8,16 > tune_splits.log
python3 scripts/ab_decode.py --out abd --rounds 2 main=build-ab/main-7e18e3b.so od=build-ab/owner-divisor.so > ab_decode.log
