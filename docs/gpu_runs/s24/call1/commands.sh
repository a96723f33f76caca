# s24 call 1: next/warm-output-fields (47ad5dd; build-ab/wof.so, timeline build build-ab/wof-timeline.so) against main d3a9080 (build-ab/main.so, build-ab/main-timeline.so): decode tests, A/B with low-latency rows, graph timeline
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/env.log 2>&1
FLASHMSA_LIBRARY=build-ab/wof.so timeout 200 python3 -m pytest tests/gpu/test_gpu_one_token.py tests/gpu/test_gpu_decode.py tests/gpu/test_gpu_determinism.py -q -x -rs > $OUT/tests_wof.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests_wof.log
timeout 260 python3 scripts/ab_decode.py --low-latency --out $OUT/abd --rounds 2 --timeout 120 main=build-ab/main.so wof=build-ab/wof.so > $OUT/ab_decode.log 2>&1; tail -22 $OUT/ab_decode.log; rm -rf $OUT/abd
for b in main wof; do FLASHMSA_LIBRARY=build-ab/$b-timeline.so TIMELINE_CASES=1x1,16x1 timeout 50 python3 scripts/timeline.py --graph > $OUT/graph_$b.log 2>&1; echo "== $b"; grep -E "hand-over|->" $OUT/graph_$b.log | cut -c1-250 | head -20; done
