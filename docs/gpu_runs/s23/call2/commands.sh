# s23 call 2: ncu source profile of batch 1 on build-ab/early.so (tried/early-first-load, c8f8cfe)
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
export FLASHMSA_LIBRARY=build-ab/early.so
mkdir -p $OUT/p1
OUT=$OUT/p1 timeout 200 scripts/profile.sh decode1 --source > /dev/null 2>&1
gzip $OUT/p1/*.csv
ls -la $OUT/p1
