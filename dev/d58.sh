#!/usr/bin/env bash
# Fifty-eighth session, device call 1 (~6 min; carry build-s58 build-d58): the GPU suite of HEAD
# (dev/gpu_suite_carried.sh build-s58), then the kernel lab at T = 512 / 8192's shapes (-DLAB_T512,
# NVFP4 lines added): A = the tiles as they are, H = -DFR_LAB_ACT16 (the MX 128-row tiles' A16
# form), S = -DFR_LAB_SKIP_WIDEN (no widening: the bound of folding NVFP4's activations too).
# Build the lab: in dev/wgmma_lab, nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1
# -I../../include -I../../src -DLAB_T512 [-DFR_LAB_ACT16 | -DFR_LAB_SKIP_WIDEN] rs_tile.cu -o X -lcuda;
# gzip into build-d58/lab/rs_tile_{A,H,S}.gz.
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
if [ "${SKIP_SUITE:-0}" = 0 ]; then dev/gpu_suite_carried.sh build-s58; echo "suite $(( $(date +%s) - t0 )) s"; fi
for v in ${LAB_VARIANTS:-A H S}; do
  carried build-d58/lab/rs_tile_$v || exit 1
  timeout 150 build-d58/lab/rs_tile_$v > $O/lab_$v.txt 2>&1; echo "== lab $v rc=$?"
  grep "cyc" $O/lab_$v.txt | sed 's/ *E [0-9].*rows K *[0-9]*://; s/GB\/s of weights.*fp16 peak//; s/(barrier.*//' | cut -c1-150
done
echo "d58 $(( $(date +%s) - t0 )) s"
