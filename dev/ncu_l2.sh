#!/usr/bin/env bash
# Kernel lab: Nsight Compute (base clocks) on split's two GEMM kernels of one forward at
# EP8-slice T (flash and pro): time, tensor-pipe active, L2 throughput, hit rate and sectors, DRAM,
# for each carried `moe_ep` binary (build-carry/NAME.gz, unpacked here).
#   dev/ncu_l2.sh [T] NAME [NAME ...]     e.g. dev/ncu_l2.sh 2048 moe_ep moe_ep_P4
# NCU_PATHS: the path (default bf16; e.g. nvfp4: its A16 tiles' fp16 rows through L2); NCU_DIR: where
# NAME is (default build-carry); NCU_GEOS: the geometries (default "flash pro").
# Writes $OUT/ncu_NAME_GEOMETRY.txt and prints the metric lines.
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
t=${1:-2048}; shift || true
[ $# -ge 1 ] || set -- moe_ep
out=${OUT:-/tmp}
m=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
m=$m,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct
m=$m,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum
m=$m,l1tex__throughput.avg.pct_of_peak_sustained_active
for v in "$@"; do
  d=${NCU_DIR:-build-carry}; carried "$d/$v" || exit 1
  for g in ${NCU_GEOS:-flash pro}; do
    f=$out/ncu_${v}_$g.txt
    ncu --kernel-name regex:'grouped_gemm' --launch-count 2 --metrics "$m" "$d/$v" bench --paths ${NCU_PATHS:-bf16} \
        --tokens "$t" --geometry ds-v4-$g --backends split --iters 1 --warmup 0 --sustain-ms 0 >"$f" 2>&1
    echo "== $v $g T=$t (rc $?)"
    grep -E '^  [A-Za-z_].*\(|^    [a-z_0-9]+__' "$f" | sed -E 's/ +/ /g' | cut -c1-150
  done
done
