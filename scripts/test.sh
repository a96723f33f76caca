#!/usr/bin/env bash
# Builds and runs every test of FlashMSA. On a fresh Debian machine it first installs what it
# needs: Python packages from PyPI, and from Debian only what is missing (cmake, a C++
# compiler, make, GoogleTest).
#
#   1. pip install .      the package as users get it: libflashmsa.so built inside the install,
#                         the sm_90a kernels too wherever nvcc is found (a CUDA build break
#                         fails here);
#   2. GoogleTest         the C ABI and the CPU reference, without Python (CPU-only build in
#                         build-test/, so CUDA is not compiled twice);
#   3. pytest tests/python   the CPU suite, against the installed package;
#   4. pytest tests/gpu      on a machine with a compute capability 9.0 GPU only;
#   5. examples/          the decode-step CUDA-graph and chunked-prefill examples, against the
#                         installed package: on the CPU always, on the GPU too where step 4 ran.
#
# Environment: PYTHON (default python3), JOBS (default nproc), BUILD_DIR (default build-test).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
BUILD_DIR=${BUILD_DIR:-build-test}
export PIP_BREAK_SYSTEM_PACKAGES=1  # Debian's own Python is "externally managed"
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONUNBUFFERED=1
# nvcc often lives outside PATH on a fresh machine.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

step() { printf '\n== %s\n' "$*"; }

step "system packages"
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v make >/dev/null || missing+=(make)
command -v c++ >/dev/null || missing+=(g++)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing from Debian: ${missing[*]}"
  as_root=""
  [ "$(id -u)" -eq 0 ] || as_root=sudo
  $as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq "${missing[@]}"
else
  echo "cmake, make, c++ and GoogleTest present"
fi
echo "nvcc: $(command -v nvcc || echo 'not found: CPU-only build')"

step "Python packages (PyPI)"
"$PYTHON" -m pip install -q torch==2.11.0 pytest numpy nvidia-cutlass==4.2.0.0

step "pip install . (builds libflashmsa.so)"
"$PYTHON" -m pip install -q .
# Test what was installed, not a development build a variable may point at.
unset FLASHMSA_LIBRARY
(cd /tmp && "$PYTHON" -c "import flashmsa; print('flashmsa', flashmsa.__version__, 'at', \
flashmsa.__file__, '| CUDA kernels:', flashmsa.has_cuda())")

step "GoogleTest (C ABI and CPU backend)"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DFLASHMSA_CUDA=OFF
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"

step "pytest tests/python (CPU)"
"$PYTHON" -m pytest tests/python -q -p no:cacheprovider

step "pytest tests/gpu"
hopper=0
if "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() and \
torch.cuda.get_device_capability() == (9, 0) else 1)" 2>/dev/null; then
  hopper=1
  "$PYTHON" -m pytest tests/gpu -q -p no:cacheprovider
else
  echo "skipped: no GPU of compute capability 9.0 here"
fi

step "examples"
devices=(cpu)
[ "$hopper" -eq 0 ] || devices+=(cuda)
for device in "${devices[@]}"; do
  for example in examples/decode_step_graph.py examples/chunked_prefill.py; do
    echo "-- $example --device $device"
    "$PYTHON" "$example" --device "$device"
  done
done

step "all tests passed"
