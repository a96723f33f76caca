#!/usr/bin/env bash
# Builds libflashmsa.so with the sm_90a kernels into build-gpu/ (here, on the development
# machine), prints ptxas' register/spill report and the SASS instruction counts that matter,
# so that the GPU machine only runs what was built here (carry build-gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-gpu -DFLASHMSA_BUILD_TESTS=OFF -DFLASHMSA_PTXAS_VERBOSE=ON \
  -DCMAKE_BUILD_TYPE=Release > /tmp/flashmsa-build-gpu.configure.log
cmake --build build-gpu -j2 2>&1 | tee build-gpu/build.log | grep -E "error|registers|spill" || true
if grep -q "bytes spill stores, [1-9]" build-gpu/build.log || grep -qE "[1-9][0-9]* bytes spill" build-gpu/build.log; then
  echo "WARNING: ptxas reports spills" >&2
fi
objdump_dir=$(python3 -c "import triton, os; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin'))" 2>/dev/null || true)
if command -v cuobjdump >/dev/null || [ -x "$objdump_dir/cuobjdump" ]; then
  PATH="$PATH:$objdump_dir" cuobjdump --dump-sass build-gpu/libflashmsa.so > build-gpu/sass.txt
  for op in HGMMA UTMALDG LDL STL; do
    printf '%-8s %s\n' "$op" "$(grep -c "$op" build-gpu/sass.txt || true)"
  done
fi
ls -la build-gpu/libflashmsa.so
