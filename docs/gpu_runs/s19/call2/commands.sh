#!/usr/bin/env bash
# session 19, call 2: MTP timelines of main (783c717, own-mask-timeline), hdr (e72d90e, 4 us slower at MTP in call1) and div (4968893); prefill A/B main vs div (one round); decode A/B main vs div (two rounds)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
for n in own-mask speculation-in-header topk-divisor; do
  FLASHMSA_LIBRARY=build-ab/$n-timeline.so TIMELINE_CASES=32x8 timeout 60 python3 scripts/timeline.py > $OUT/timeline_mtp_$n.log 2>&1; echo "== $n"; head -21 $OUT/timeline_mtp_$n.log | grep -E "spread|located|planned|first_k|softmax|first_v|last_k|loop|end |clock"
done
timeout 200 python3 scripts/ab_decode.py --bench prefill --out $OUT/abp --rounds 1 --timeout 90 main=build-ab/main18b.so div=build-ab/topk-divisor.so > $OUT/ab_prefill.log 2>&1; tail -6 $OUT/ab_prefill.log; rm -rf $OUT/abp/*/
timeout 170 python3 scripts/ab_decode.py --out $OUT/abd --rounds 2 --timeout 45 div=build-ab/topk-divisor.so main=build-ab/main18b.so > $OUT/ab_decode.log 2>&1; tail -10 $OUT/ab_decode.log; rm -rf $OUT/abd/*/
