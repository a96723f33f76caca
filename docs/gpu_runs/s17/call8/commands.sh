#!/usr/bin/env bash
# session 17, call 8: two speculative blocks for the sorted warp plan (3f2c7ba, branch tried/speculate-two; build-gpu = build-ab/spec2.so): MTP and prefill-tile sweep of FLASHMSA_TUNE_SPECULATE=1 (one block, main's behaviour) against the default 2; then the GPU suite if MTP batch 32 gained, else the sorted-plan tests
export PYTHONPATH=python:scripts PYTHONUNBUFFERED=1
FLASHMSA_LIBRARY=build-gpu/libflashmsa.so TUNE_SETS=3 TUNE_CASES=32x8,24x8,64x8,8x8 timeout 60 python3 scripts/kernel_smoke.py --tune FLASHMSA_TUNE_SPECULATE=1 > $OUT/tune_speculate.log 2>&1; grep tune $OUT/tune_speculate.log
python3 - $OUT/tune_speculate.log <<'PY' && BUDGET=300 TESTS_TIMEOUT=290 OUT=$OUT bash scripts/gpu_check.sh tests > $OUT/gpu_check.log 2>&1 || FLASHMSA_LIBRARY=build-gpu/libflashmsa.so timeout 60 python3 -m pytest -q tests/gpu/test_gpu_determinism.py -k sorted > $OUT/sorted_tests.log 2>&1
import re, sys
t = {}
for line in open(sys.argv[1]):
    m = re.match(r"tune b 32 t8 kv 32768 (\S+)\s+([\d.]+) us", line)
    if m: t.setdefault(m.group(1), []).append(float(m.group(2)))
two, one = min(t.get("default=", [1e9])), min(t.get("FLASHMSA_TUNE_SPECULATE=1", [0]))
print("b32 default", two, "one block", one, flush=True)
sys.exit(0 if two < one - 1.0 else 1)
PY
tail -4 $OUT/gpu_tests.log 2>/dev/null; tail -3 $OUT/gpu_check.log 2>/dev/null; tail -3 $OUT/sorted_tests.log 2>/dev/null
