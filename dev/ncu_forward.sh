#!/usr/bin/env bash
# Kernel lab: the duration of every kernel of one split (or mega) forward of an
# EP8-slice bench cell, from Nsight Compute (kernels serialised, caches
# flushed: the sum is not the bench's forward time, the gap between them is
# launch latency and overlap).
#   dev/ncu_forward.sh PATH T [geometry] [backend]   (after scripts/device.sh built build-device/)
# MOE_EP_BIN: another moe_ep binary (e.g. one carried in build-carry/). Clocks are
# left as they run (--clock-control none), so durations compare with the bench's.
# BENCH_EXTRA: more bench arguments (e.g. "--ranks 8"); NCU_LAUNCHES: kernels profiled (12).
set -uo pipefail
cd "$(dirname "$0")/.."
p=${1:-bf16}; t=${2:-8}; geo=${3:-ds-v4-flash}; be=${4:-split}
out=${OUT:-/tmp}; f="$out/ncu_fwd_${p}_${t}_${be}.csv"
export MOE_EP_KNOB_CACHE=off
ncu --clock-control none --kernel-name regex:'plan_|dispatch|grouped|wgmma|combine|publish|mega' --launch-skip 0 --launch-count ${NCU_LAUNCHES:-12} \
    --metrics gpu__time_duration.sum --csv --print-units base \
    ${MOE_EP_BIN:-build-device/tools/moe_ep} bench --paths "$p" --tokens "$t" --geometry "$geo" --backends "$be" \
    --iters 1 --warmup 0 ${BENCH_EXTRA:-} >"$f" 2>/dev/null
echo "== kernels of one forward: $p T=$t $geo $be (us)"
grep gpu__time_duration "$f" | awk -F'","' '{n=$5; v=$NF; u=$(NF-1); gsub(/"|,/,"",v); gsub(/\(.*/,"",n); printf "  %-34s %10.1f us (%s/1000)\n", substr(n,1,34), v/1000, u}' | head -n ${NCU_LAUNCHES:-12}
