#!/usr/bin/env bash
# Hardware-counter profile of the sm90 kernels on the GPU machine (Firecracker runtime, where ncu
# reads counters; clocks are left alone). Reports go to $OUT (or ./profile-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-profile-out}
mkdir -p "$out"
export FLASHMSA_LIBRARY=${FLASHMSA_LIBRARY:-build-gpu/libflashmsa.so} PYTHONPATH=python
ncu --clock-control none --profile-from-start off -k regex:prefill_kernel \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section LaunchStats --section Occupancy \
  python3 scripts/profile_kernels.py "${1:-both}" > "$out/ncu.txt" 2>&1
grep -E "prefill_kernel|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\)|Stall|Warp Cycles Per Issued|Achieved Occupancy|Block Size|Grid Size|Registers|Shared Memory Configuration Size|One or More Eligible|Issued Warp" "$out/ncu.txt" | head -80
