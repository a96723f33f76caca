#!/usr/bin/env bash
# Hardware-counter profile of the sm90 kernels on the GPU machine (Firecracker runtime, where ncu
# reads counters; clocks are left alone). Reports go to $OUT (or ./profile-out).
#
#   scripts/profile.sh [decode|decode1|decode16|mtp|prefill|both] [--source]
#
# --source adds warp-state sampling per SASS instruction (source.csv: stall reasons by
# instruction, to place a phase's time without a timeline build).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-profile-out}
mkdir -p "$out"
export FLASHMSA_LIBRARY=${FLASHMSA_LIBRARY:-build-gpu/libflashmsa.so} PYTHONPATH=python
which=${1:-both}
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats
          --section SchedulerStats --section LaunchStats --section Occupancy
          --section ComputeWorkloadAnalysis --section InstructionStats)
if [ "${2:-}" = "--source" ]; then
  ncu --clock-control none --cache-control none --profile-from-start off \
    -k "regex:prefill_kernel|decode_kernel" "${sections[@]}" \
    --section SourceCounters --warp-sampling-interval 0 --import-source no \
    -f -o "$out/$which" python3 scripts/profile_kernels.py "$which" > "$out/ncu_$which.txt" 2>&1
  ncu -i "$out/$which.ncu-rep" --page source --print-source sass --csv \
    > "$out/source_$which.csv" 2>&1
  ncu -i "$out/$which.ncu-rep" >> "$out/ncu_$which.txt" 2>&1
  rm -f "$out/$which.ncu-rep"
  head -c 2000 "$out/source_$which.csv"
  exit
fi
ncu --clock-control none --profile-from-start off -k "regex:prefill_kernel|decode_kernel" "${sections[@]}" \
  python3 scripts/profile_kernels.py "$which" > "$out/ncu.txt" 2>&1
grep -E "prefill_kernel|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\)|Stall|Warp Cycles Per Issued|Achieved Occupancy|Block Size|Grid Size|Registers|Shared Memory Configuration Size|One or More Eligible|Issued Warp" "$out/ncu.txt" | head -80
