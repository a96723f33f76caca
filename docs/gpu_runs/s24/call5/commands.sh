# s24 call 5: next/scale-early (build-ab/vscale.so): one-token and decode GPU tests; A/B of old main d3a9080 (build-ab/main.so), main 0cf5fdb = push-prepared (build-ab/prep.so) and vscale, two rounds
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-ab/vscale.so timeout 230 python3 -m pytest tests/gpu/test_gpu_one_token.py tests/gpu/test_gpu_decode.py -q -x -rs > $OUT/tests_vscale.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests_vscale.log
timeout 330 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 100 d3a9080=build-ab/main.so 0cf5fdb=build-ab/prep.so vscale=build-ab/vscale.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd
