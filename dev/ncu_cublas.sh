#!/usr/bin/env bash
# Kernel lab: Nsight Compute (base clocks, so no power cap in it) on cuBLAS's bf16 GEMMs of one
# EP8-slice cell (dev/wgmma_lab/cublas_grouped.cu: dense, then strided batched) beside split's
# bf16 GEMM kernels of the same cell: kernel names (cuBLAS's give its tile and cluster), time,
# tensor-pipe and memory use.
#   dev/ncu_cublas.sh MOE_EP_BINARY CUBLAS_LAB [flash|pro] [T]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$1 lab=$2 g=${3:-flash} t=${4:-8192}
out=${OUT:-/tmp}; export MOE_EP_KNOB_CACHE=off
m=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
m=$m,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed
m=$m,launch__grid_size,launch__block_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__registers_per_thread
m=$m,launch__shared_mem_per_block_dynamic,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second
CUBLAS_LAB_ONCE=1 ncu --launch-count 4 --metrics "$m" $lab $g $t > $out/ncu_cublas_${g}_$t.txt 2>&1
echo "== cuBLAS $g T=$t (rc $?)"
grep -E '^  [A-Za-z_].*\(|^    [a-z_]+__' $out/ncu_cublas_${g}_$t.txt | sed -E 's/ +/ /g' | cut -c1-200
geo=ds-v4-$g
ncu --kernel-name regex:'grouped_gemm' --launch-count 2 --metrics "$m" \
    $bin bench --paths bf16 --tokens $t --geometry $geo --backends split --iters 1 --warmup 0 --sustain-ms 0 \
    > $out/ncu_split_${g}_$t.txt 2>&1
echo "== split bf16 $geo T=$t (rc $?)"
grep -E '^  [A-Za-z_].*\(|^    [a-z_]+__' $out/ncu_split_${g}_$t.txt | sed -E 's/ +/ /g' | cut -c1-200
