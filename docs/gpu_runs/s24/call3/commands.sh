# s24 call 3: next/push-prepared (build-ab/prep.so; timeline build build-ab/prep-timeline.so) against main 2dd00b4 (build-ab/main.so = d3a9080's kernels): one-token and decode GPU tests, A/B with low-latency rows, graph timeline
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/prep.so timeout 230 python3 -m pytest tests/gpu/test_gpu_one_token.py tests/gpu/test_gpu_decode.py -q -x -rs > $OUT/tests_prep.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests_prep.log
FLASHMSA_LIBRARY=build-ab/prep-timeline.so TIMELINE_CASES=1x1,16x1 timeout 50 python3 scripts/timeline.py --graph > $OUT/graph_prep.log 2>&1; grep -E "every phase|    call [4-6]:" $OUT/graph_prep.log | cut -c1-600
timeout 250 python3 scripts/ab_decode.py --low-latency --out $OUT/abd --rounds 2 --timeout 110 main=build-ab/main.so prep=build-ab/prep.so > $OUT/ab_decode.log 2>&1; tail -22 $OUT/ab_decode.log; rm -rf $OUT/abd
