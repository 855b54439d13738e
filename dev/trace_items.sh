#!/usr/bin/env bash
# device (~10 s a cell): mega's item trace of one forward per cell on the EP8 slice, summed by
# dev/trace_items.py (per item kind: span, busy, waits; GEMM items' run times and KB/us; the
# blocks in a GEMM over the span; each block's last item end), beside the same forward timed
# between CUDA events as the bench times it (what lies outside the kernel's blocks).
#   dev/trace_items.sh [path:geometry:T ...]     default: mxfp8, fp8_block and w4a8 at flash 8
# Needs build-carry/moe_ep_T.gz (a -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF build of the tool), or
# TRACE_BIN=DIR/NAME (DIR/NAME.gz or .xz, another trace build; its dumps named NAME_path_geometry_T);
# BENCH_EXTRA: more bench arguments (e.g. "--ranks 8": the emulated group).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
bin=${TRACE_BIN:-build-carry/moe_ep_T}; tag=$(basename "$bin")
. "$(dirname "$0")/../scripts/carried.sh"; carried "$bin" || { echo "no $bin(.gz|.xz)"; exit 1; }
cells=${*:-mxfp8:ds-v4-flash:8 fp8_block:ds-v4-flash:8 w4a8:ds-v4-flash:8}
for c in $cells; do
  IFS=: read -r path geo T <<< "$c"
  MOE_EP_MEGA_TRACE_DUMP=$OUT/dump_${tag}_${path}_${geo}_$T.txt timeout 120 "$bin" bench --paths $path --backends mega \
    --geometry $geo --tokens $T --iters 5 --warmup 1 ${BENCH_EXTRA:-} > $OUT/log_${tag}_${path}_${geo}_$T.txt 2>&1
  echo "$tag $c rc=$? $(grep -h 'mega timeline' $OUT/log_${tag}_${path}_${geo}_$T.txt | head -1)"
done
python3 "$(dirname "$0")/trace_items.py" $OUT/dump_${tag}_*.txt
