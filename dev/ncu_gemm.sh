#!/usr/bin/env bash
# Kernel lab: Nsight Compute on the grouped-GEMM kernels (or the mega kernel)
# of one EP8-slice bench cell, to see what limits a tile (DRAM, issue, stalls).
#   dev/ncu_gemm.sh PATH T [geometry] [backend]     (after scripts/device.sh built build-device/)
# Writes $OUT/ncu_PATH_T_backend.txt and prints the lines that matter.
set -uo pipefail
cd "$(dirname "$0")/.."
p=${1:-nvfp4}; t=${2:-8}; geo=${3:-ds-v4-flash}; be=${4:-split}
out=${OUT:-/tmp}; f="$out/ncu_${p}_${t}_${be}.txt"
export MOE_EP_KNOB_CACHE=off
ncu --kernel-name regex:'grouped_gemm|mega|wgmma' --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section Occupancy --section LaunchStats --section SchedulerStats \
    build-device/tools/moe_ep bench --paths "$p" --tokens "$t" --geometry "$geo" --backends "$be" \
    --iters 1 --warmup 0 >"$f" 2>&1
echo "== ncu $p T=$t $geo $be (rc $?)"
grep -E '^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Dynamic Shared Memory Per Block|Grid Size|Block Size|Warp Cycles Per Issued|Issued Warp Per Scheduler|No Eligible|stalled|L2 Hit Rate|Mem Busy|Max Bandwidth' "$f" \
  | sed -E 's/ +/ /g' | cut -c1-220 | head -n 60
