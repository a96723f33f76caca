# session 13, call 2 (compact-slots: first build of the compact receive slots, with a bug in the
# owner's own-row offset that suite_one_token.log caught; timings only)
FLASHMSA_LIBRARY=$L python3 -m pytest tests/gpu/test_gpu_one_token.py -x -q -rs > suite_one_token.log
FLASHMSA_LIBRARY=$L TUNE_CASES=1x1,8x1 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPLITS=8,16 FLASHMSA_TUNE_DEEP_PIPELINE=0 > tune_default.log
FLASHMSA_LIBRARY=$L FLASHMSA_TUNE_SPLITS=16 TUNE_CASES=1x1 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_DEEP_PIPELINE=0,1 FLASHMSA_TUNE_STAGES=1 > tune_s16.log
FLASHMSA_LIBRARY=compact-slots-timeline.so FLASHMSA_TUNE_SPLITS=16 FLASHMSA_TUNE_DEEP_PIPELINE=0 TIMELINE_CASES=1x1 python3 scripts/timeline.py --all > timeline_s16_two.log
python3 scripts/ab_decode.py --out abd --rounds 2 od=build-ab/owner-divisor.so cs=$L > ab_decode.log
python3 scripts/ab_decode.py --out abs --rounds 1 s16=$L,FLASHMSA_TUNE_SPLITS=16,FLASHMSA_TUNE_DEEP_PIPELINE=0 > ab_s16.log
