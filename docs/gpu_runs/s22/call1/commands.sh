export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv > $OUT/smi.txt
timeout 150 build-probe/gather_ceiling 4 2>&1 | tee $OUT/gather_ceiling.log
timeout 200 python3 scripts/ab_decode.py --out $OUT/abd --rounds 1 --timeout 95 main=build-ab/few-rows.so 2>&1 | tail -30; rm -rf $OUT/abd/*/
