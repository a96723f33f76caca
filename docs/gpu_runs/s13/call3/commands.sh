# session 13, call 3 (rule16: compact slots fixed + one block per split wherever max_union <= splits;
# kernels SASS-identical to 09feab5's; compact-slots.so = the fixed compact slots, 8 splits at batch 1)
L=build-ab/rule16.so
FLASHMSA_LIBRARY=$L python3 -m pytest tests/gpu/test_gpu_one_token.py -x -q -rs > suite_one_token.log
FLASHMSA_LIBRARY=$L TUNE_SETS=8 TUNE_CASES=1x1,2x1,3x1 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=8,16 FLASHMSA_TUNE_CTAS_PER_SM=1 > tune_sets.log
python3 scripts/ab_decode.py --out abd --rounds 1 cs=build-ab/compact-slots.so r16=$L r16deep=$L,FLASHMSA_TUNE_CTAS_PER_SM=1 > ab_decode.log
FLASHMSA_LIBRARY=$L python3 -m pytest tests/gpu -q -rs --ignore=tests/gpu/test_gpu_one_token.py > suite.log
