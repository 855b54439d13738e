#!/usr/bin/env bash
# Kernel lab: where the warps of split's GEMM kernels stall (Nsight Compute's
# warp-state sampling by SASS line: SourceCounters), for one EP8-slice cell.
#   dev/ncu_stalls.sh MOE_EP_BINARY PATH T [geometry] [kernel regex] [launches]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$1 p=${2:-bf16} t=${3:-8192} geo=${4:-ds-v4-flash} k=${5:-grouped_gemm} n=${6:-2}
out=${OUT:-/tmp}; f="$out/ncu_stalls_${p}_${t}_${geo}.txt"
export MOE_EP_KNOB_CACHE=off
ncu --kernel-name regex:"$k" --launch-count $n --section WarpStateStats --section SourceCounters \
    --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
    $bin bench --paths $p --tokens $t --geometry $geo --backends split --iters 1 --warmup 0 --sustain-ms 0 >"$f" 2>&1
echo "== ncu stalls $p T=$t $geo (rc $?)"
grep -vE '^==PROF==|^moe_ep|^\s*$|^- |^\|' "$f" | sed -E 's/ +/ /g' | cut -c1-200 | head -n 150
