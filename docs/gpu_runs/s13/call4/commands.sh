# session 13, call 4 (final13 = 09feab5's library; main-7e18e3b = main's kernels before the session)
FLASHMSA_LIBRARY=build-ab/final13-timeline.so TIMELINE_CASES=1x1,16x1 python3 scripts/timeline.py > timeline_final.log
python3 scripts/ab_decode.py --out abd --rounds 2 main=build-ab/main-7e18e3b.so new=build-ab/final13.so > ab_decode.log
FLASHMSA_LIBRARY=build-ab/final13.so python3 -m pytest tests/gpu -q -rs > suite.log
