#!/usr/bin/env bash
# Kernel lab: which pipe limits a GEMM kernel (tensor, conversion/XU, ALU,
# FMA, shared memory) and why warps stall, for one EP8-slice bench cell.
#   [MOE_EP_BIN=carried/moe_ep] dev/ncu_pipes.sh PATH T [geometry] [backend] [kernel regex] [launches]
#   (default binary: build-device/tools/moe_ep, after scripts/device.sh built it)
set -uo pipefail
cd "$(dirname "$0")/.."
p=${1:-fp8_block}; t=${2:-8192}; geo=${3:-ds-v4-flash}; be=${4:-split}; k=${5:-grouped_gemm|mega}; n=${6:-2}
bin=${MOE_EP_BIN:-build-device/tools/moe_ep}
out=${OUT:-/tmp}; f="$out/ncu_pipes_${p}_${t}_${be}.txt"
export MOE_EP_KNOB_CACHE=off
m=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
m=$m,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active
m=$m,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active
m=$m,sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
m=$m,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
m=$m,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second,dram__bytes_read.sum.per_second
m=$m,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio
m=$m,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
m=$m,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio
m=$m,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio
m=$m,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_misc_per_issue_active.ratio
m=$m,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio
m=$m,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio
m=$m,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio
ncu --kernel-name regex:"$k" --launch-count $n --metrics "$m" \
    $bin bench --paths "$p" --tokens "$t" --geometry "$geo" --backends "$be" \
    --iters 1 --warmup 0 --sustain-ms 0 >"$f" 2>&1
echo "== ncu pipes $p T=$t $geo $be (rc $?)"
grep -E '^  [a-z_]+.*\(|pct|ratio|duration|per_second' "$f" | sed -E 's/ +/ /g' | cut -c1-160 | head -n 70
