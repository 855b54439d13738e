#!/usr/bin/env bash
# Kernel lab (carry build-d56/lab): the MX 128-row tiles with the activations as fp16 rows by
# TMA (H: -DFR_LAB_ACT16) against main's (A) and main's without the widening (S); C: MXFP8's
# 128-row rings as 2 activation + 2 weight + 3 fp16 stages; I: H with C's rings. Build (CI machine,
# a copy of the tree with dev/drafts/lab_act16.patch applied, in dev/wgmma_lab; gzip each into
# build-d56/lab/): nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 -I../../include
# -I../../src -DLAB_T512 [-DFR_LAB_ACT16 | -DFR_LAB_SKIP_WIDEN] rs_tile.cu -o rs_tile_X -lcuda; C and
# I from a wrapper .cu that defines FR_CVT_OF (3 for MXFP8) and FR_RAW_OF (2 for E4M3 at 128 rows)
# before #include "rs_tile.cu" (the numbers: docs/benchmarks.md, fifty-sixth session).
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
for v in A H S C I; do
  carried build-d56/lab/rs_tile_$v || exit 1
  timeout 150 build-d56/lab/rs_tile_$v > $O/lab_$v.txt 2>&1; echo "== lab $v rc=$?"
  grep "cyc" $O/lab_$v.txt | sed 's/ *E [0-9].*rows K *[0-9]*://; s/GB\/s of weights.*fp16 peak//; s/(barrier.*//' | cut -c1-150
done
