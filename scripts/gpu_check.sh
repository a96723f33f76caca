#!/usr/bin/env bash
# The one script the GPU machine runs: environment, SASS summary of the library, the GPU test
# suite, and the benchmarks, each under a `timeout` so the whole run fits the machine's
# 10-minute command; a failing step is recorded and the next one still runs.
#
#   scripts/gpu_check.sh [all|tests|bench|prefill|decode|engine|wheel|timeline|tune|study|sass]
#                        [pytest args...]
#
#   all (default)  sass + tests + prefill (quick) + decode (quick)
#   tests          sass + tests; extra args go to pytest (e.g. -k decode, --lf)
#   bench          sass + prefill (quick) + decode (quick)
#   prefill|decode sass + that benchmark, all of its cases (not --quick)
#   engine         sass + the vLLM entry points against the direct call, and mixed chunked-prefill
#                  batches against single requests (both --quick)
#   wheel          the wheel in dist/ (built where nvcc is, carried) installed with --no-deps into
#                  a fresh directory, and the examples run on CUDA through it alone
#   timeline       sass + scripts/timeline.py on the timeline build (TIMELINE_LIBRARY)
#   tune           sass + scripts/kernel_smoke.py --tune $TUNE_ARGS (launch overrides)
#   study          sass + tests + timeline + tune: a decode change's first run
#
# Environment: FLASHMSA_LIBRARY (default build-gpu/libflashmsa.so), OUT (default
# out/gpu_check; the device machine sets it), BUDGET (seconds for the whole script, default
# 570), TESTS_TIMEOUT / PREFILL_TIMEOUT / DECODE_TIMEOUT (caps per step), PREFILL_ARGS /
# DECODE_ARGS (extra benchmark options, e.g. PREFILL_ARGS="--sizes 32768 --impls msa"),
# TIMELINE_LIBRARY (default build-timeline/libflashmsa.so, configured -DFLASHMSA_TIMELINE=ON),
# TUNE_ARGS (launch overrides to sweep, flashmsa.testing.FIELDS: e.g. "splits=1,4 decode_kernel=0,2").
# Files written under $OUT (the device machine returns at most 8): sass_summary.txt,
# gpu_tests.log, bench.log, prefill.{csv,json,png}, decode.{csv,json}, timeline.log, tune.log,
# vllm_entry.{csv,json}, mixed_prefill.{csv,json}, wheel.log.
set -uo pipefail
cd "$(dirname "$0")/.."

mode=${1:-all}
[ $# -gt 0 ] && shift
case "$mode" in
  all|tests|bench|prefill|decode|engine|wheel|timeline|tune|study|sass) ;;
  -*) set -- "$mode" "$@"; mode=all ;;
  *) echo "usage: $0 [all|tests|bench|prefill|decode|engine|wheel|timeline|tune|study|sass]" \
          "[pytest args...]" >&2
     exit 2 ;;
esac

export FLASHMSA_LIBRARY=${FLASHMSA_LIBRARY:-build-gpu/libflashmsa.so}
export PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
BUDGET=${BUDGET:-570}
start=$(date +%s)
summary=()

remaining() { echo $(( BUDGET - ($(date +%s) - start) )); }

# step_timeout CAP: the step's limit, never past the budget (less 10 s for the summary).
step_timeout() {
  local left=$(( $(remaining) - 10 ))
  (( left < $1 )) && echo "$left" || echo "$1"
}

record() {  # record NAME STATUS SECONDS DETAIL
  summary+=("$(printf '%-8s %-8s %6ss  %s' "$1" "$2" "$3" "$4")")
}

status_of() {  # the exit code of a `timeout` step, in words
  case "$1" in
    0) echo ok ;;
    124|137) echo TIMEOUT ;;
    *) echo "FAIL($1)" ;;
  esac
}

echo "== environment"
nvidia-smi -L 2>&1 || echo "nvidia-smi not available"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'device', torch.cuda.get_device_name() if torch.cuda.is_available() else None)"
echo "FLASHMSA_LIBRARY=$FLASHMSA_LIBRARY ($(ls -la "$FLASHMSA_LIBRARY" 2>&1 | awk '{print $5, $6, $7, $8}'))"
# FLASHMSA_COMMIT (the commit the carried library was built from) wins: the GPU machine's copy of
# .git can be stale.
echo "commit: ${FLASHMSA_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"

run_sass() {
  local t0=$(date +%s) dump=/tmp/flashmsa_sass.txt objdump
  objdump=$(command -v cuobjdump || true)
  if [ -z "$objdump" ]; then
    objdump=$(python3 -c "import triton, os; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/cuobjdump'))" 2>/dev/null || true)
  fi
  if [ -z "$objdump" ] || [ ! -x "$objdump" ] || [ ! -f "$FLASHMSA_LIBRARY" ]; then
    echo "no cuobjdump or no library at $FLASHMSA_LIBRARY" | tee "$OUT/sass_summary.txt"
    record sass SKIP $(( $(date +%s) - t0 )) "no cuobjdump or library"
    return
  fi
  timeout 120 "$objdump" --dump-sass "$FLASHMSA_LIBRARY" > "$dump" 2>&1
  {
    echo "SASS of $FLASHMSA_LIBRARY (cuobjdump --dump-sass)"
    for op in HGMMA UTMALDG LDL STL; do
      printf '%-8s %6d\n' "$op" "$(grep -cE "\\b$op(\\.|\\s)" "$dump")"
    done
    echo
    echo "per function: HGMMA UTMALDG LDL STL  name"
    awk '/Function :/ { name = $3 }
         name != "" && /HGMMA/   { h[name]++ }
         name != "" && /UTMALDG/ { t[name]++ }
         name != "" && /[^A-Z]LDL[. ]/ { l[name]++ }
         name != "" && /[^A-Z]STL[. ]/ { s[name]++ }
         /Function :/ { seen[name] = 1 }
         END { for (n in seen) printf "%6d %7d %4d %4d  %s\n", h[n], t[n], l[n], s[n], n }' "$dump"
  } > "$OUT/sass_summary.txt"
  cat "$OUT/sass_summary.txt"
  local counts
  counts=$(awk 'NR>1 && NR<6 {printf "%s %s  ", $1, $2}' "$OUT/sass_summary.txt")
  record sass ok $(( $(date +%s) - t0 )) "$counts"
}

run_tests() {  # run_tests DEFAULT_TIMEOUT [pytest args...]
  local t0=$(date +%s) limit rc
  limit=$(step_timeout "${TESTS_TIMEOUT:-$1}")
  shift
  echo "== tests/gpu (timeout ${limit}s)"
  timeout --signal=INT --kill-after=15 "$limit" \
    python3 -m pytest tests/gpu -x -q -rs --durations=15 "$@" 2>&1 | tee "$OUT/gpu_tests.log"
  rc=${PIPESTATUS[0]}
  local last
  last=$(grep -E "passed|failed|error|skipped|no tests ran" "$OUT/gpu_tests.log" | tail -n 1)
  record tests "$(status_of "$rc")" $(( $(date +%s) - t0 )) "${last:-no pytest summary line}"
}

run_bench() {  # run_bench NAME MODULE DEFAULT_TIMEOUT OPTIONS
  local t0=$(date +%s) limit rc
  limit=$(step_timeout "$3")
  if (( limit < 30 )); then
    record "$1" SKIP 0 "budget spent"
    return
  fi
  echo "== bench $1 (timeout ${limit}s)"
  # shellcheck disable=SC2086 # extra args are split on purpose
  timeout --signal=INT --kill-after=15 "$limit" \
    python3 -m "$2" --out "$OUT" $4 2>&1 | tee -a "$OUT/bench.log"
  rc=${PIPESTATUS[0]}
  local line
  case "$1" in
    prefill) line=$(grep -E "^production-weighted aggregate msa" "$OUT/bench.log" | tail -n 1) ;;
    decode) line=$(grep -E "^decode suite full" "$OUT/bench.log" | tail -n 1) ;;
    vllm_entry) line=$(grep -E "^entry points within" "$OUT/bench.log" | tail -n 1) ;;
    mixed_prefill) line=$(grep -E "^aggregate: mixes" "$OUT/bench.log" | tail -n 1) ;;
  esac
  record "$1" "$(status_of "$rc")" $(( $(date +%s) - t0 )) "${line:-see bench.log}"
}

run_script() {  # run_script NAME DEFAULT_TIMEOUT LOG command...: a diagnostic script's step
  local name=$1 limit log=$3 t0=$(date +%s) rc
  limit=$(step_timeout "$2")
  shift 3
  if (( limit < 20 )); then
    record "$name" SKIP 0 "budget spent"
    return
  fi
  echo "== $name (timeout ${limit}s)"
  timeout --signal=INT --kill-after=15 "$limit" "$@" 2>&1 | tee "$OUT/$log"
  rc=${PIPESTATUS[0]}
  record "$name" "$(status_of "$rc")" $(( $(date +%s) - t0 )) "see $log"
}

# The wheel alone: installed with --no-deps (PyTorch is the machine's) into a fresh directory,
# imported from there with FLASHMSA_LIBRARY unset, so the library that runs is the wheel's.
run_wheel() {
  local t0=$(date +%s) whl target=/tmp/flashmsa_wheel limit rc
  whl=$(ls dist/flashmsa-*.whl 2>/dev/null | head -n 1)
  if [ -z "$whl" ]; then
    record wheel SKIP 0 "no dist/flashmsa-*.whl (build it where nvcc is and carry it)"
    return
  fi
  limit=$(step_timeout "${WHEEL_TIMEOUT:-240}")
  rm -rf "$target"
  echo "== wheel $whl (timeout ${limit}s a step)"
  {
    env -u FLASHMSA_LIBRARY timeout "$limit" \
      python3 -m pip install --no-deps --no-index --target "$target" "$whl" &&
    env -u FLASHMSA_LIBRARY PYTHONPATH="$target" timeout 120 python3 - "$target" <<'PY' &&
import sys
import flashmsa
print("flashmsa from", flashmsa.__file__, "has_cuda", flashmsa.has_cuda())
sys.exit(0 if flashmsa.__file__.startswith(sys.argv[1]) and flashmsa.has_cuda() else 1)
PY
    env -u FLASHMSA_LIBRARY PYTHONPATH="$target" timeout "$limit" \
      python3 examples/decode_step_graph.py --device cuda &&
    env -u FLASHMSA_LIBRARY PYTHONPATH="$target" timeout "$limit" \
      python3 examples/chunked_prefill.py --device cuda
  } 2>&1 | tee "$OUT/wheel.log"
  rc=${PIPESTATUS[0]}
  record wheel "$(status_of "$rc")" $(( $(date +%s) - t0 )) "$(basename "$whl"), see wheel.log"
}

run_timeline() {
  run_script timeline "${TIMELINE_TIMEOUT:-90}" timeline.log \
    env FLASHMSA_LIBRARY="${TIMELINE_LIBRARY:-build-timeline/libflashmsa.so}" \
    python3 scripts/timeline.py
}

run_tune() {
  # shellcheck disable=SC2086 # TUNE_ARGS holds several NAME=values words
  run_script tune "${TUNE_TIMEOUT:-240}" tune.log python3 scripts/kernel_smoke.py --tune ${TUNE_ARGS:-}
}

run_sass
case "$mode" in
  all)     run_tests 330 "$@"  # the suite takes about 270 s on the H200
           run_bench prefill bench.prefill "${PREFILL_TIMEOUT:-150}" "--quick ${PREFILL_ARGS:-}"
           run_bench decode bench.decode "${DECODE_TIMEOUT:-80}" "--quick ${DECODE_ARGS:-}" ;;
  tests)   run_tests 540 "$@" ;;
  bench)   run_bench prefill bench.prefill "${PREFILL_TIMEOUT:-360}" "--quick ${PREFILL_ARGS:-}"
           run_bench decode bench.decode "${DECODE_TIMEOUT:-190}" "--quick ${DECODE_ARGS:-}" ;;
  prefill) run_bench prefill bench.prefill "${PREFILL_TIMEOUT:-550}" "${PREFILL_ARGS:-}" ;;
  decode)  run_bench decode bench.decode "${DECODE_TIMEOUT:-550}" "${DECODE_ARGS:-}" ;;
  engine)  run_bench vllm_entry bench.vllm_entry "${ENTRY_TIMEOUT:-240}" "--quick"
           run_bench mixed_prefill bench.mixed_prefill "${MIXED_TIMEOUT:-300}" "--quick" ;;
  wheel)   run_wheel ;;
  timeline) run_timeline ;;
  tune)    run_tune ;;
  study)   run_tests 280 "$@"
           run_timeline
           run_tune ;;
  sass)    ;;
esac

echo
echo "== gpu_check summary ($mode, $(( $(date +%s) - start ))s of ${BUDGET}s, files in $OUT)"
printf '%s\n' "${summary[@]}"
failed=0
for line in "${summary[@]}"; do
  case "$line" in *FAIL*|*TIMEOUT*) failed=1 ;; esac
done
exit $failed
