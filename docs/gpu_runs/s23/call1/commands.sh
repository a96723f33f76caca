# s23 call 1: tests, A/B and timeline of the early first load. build-ab/main.so = main 0b278a5 (kernels of ca69aeb); build-ab/early.so = tried/early-first-load (c8f8cfe's sources); build-timeline = the same with -DFLASHMSA_TIMELINE=ON
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/env.log 2>&1
FLASHMSA_LIBRARY=build-ab/early.so timeout 250 python3 -m pytest tests/gpu/test_gpu_one_token.py tests/gpu/test_gpu_decode.py tests/gpu/test_gpu_determinism.py -q -x -rs > $OUT/tests_subset.log 2>&1; echo "tests rc=$?"; tail -5 $OUT/tests_subset.log
timeout 230 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 100 main=build-ab/main.so early=build-ab/early.so > $OUT/ab_decode.log 2>&1; tail -16 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
FLASHMSA_LIBRARY=build-timeline/libflashmsa.so TIMELINE_CASES=1x1,64x1 timeout 60 python3 scripts/timeline.py > $OUT/timeline.log 2>&1; grep -v "^TL" $OUT/timeline.log | head -60 > $OUT/timeline_summary.log
