#!/usr/bin/env bash
# ptxas's registers and spills of one mega_forward instance (~6 s instead of
# the whole mega.cu's ~2 min), on any machine with nvcc (the CI machine too):
#   scripts/ptxas_mega.sh BM MODE SB [nvcc args...]
# MODE by name (src/kernels/mega.cu): BF16 FP8 CVT WGMMA QGMMA FP8_RS MX_RS W4_RS NV_RS;
# SB 0, 32 or 128, as launch_for_format instantiates them, e.g.
#   scripts/ptxas_mega.sh 128 W4_RS 32      scripts/ptxas_mega.sh 128 WGMMA 0
# Extra nvcc args (-DSOME_LAB_SWITCH) pass through. Prints ptxas's lines for
# mega_forward; the build itself still checks every instance (--warn-on-spills).
# A guide only: ptxas's C7511 (serialised wgmma, which the build refuses) in
# a 128-row instance came and went with item-code changes in the full
# mega.cu where this one-instance build showed none (docs/benchmarks.md,
# twenty-seventh session); only the full build decides.
# PTXAS_MEGA_CUBIN=FILE keeps the cubin (e.g. for dev/sass_wgmma_loops.py).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n '2,9p' "$0"; exit 2; }
bm=$1 mode=MODE_$2 sb=$3; shift 3
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
nvcc -O3 -DNDEBUG -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas=-v -Iinclude -Isrc \
  -DMOE_EP_HAVE_CUDA=1 -DMOE_EP_MEGA_ONE_INSTANCE -DMOE_EP_MEGA_ONE_BM="$bm" -DMOE_EP_MEGA_ONE_MODE="$mode" \
  -DMOE_EP_MEGA_ONE_SB="$sb" "$@" -cubin -o "$out/mega.cubin" src/kernels/mega.cu 2>&1 |
  grep -E -A3 "Compiling entry function '_Z12mega_forward|C75" | grep -E "Compiling|spill|Used|C75"
if [ -n "${PTXAS_MEGA_CUBIN:-}" ]; then cp "$out/mega.cubin" "$PTXAS_MEGA_CUBIN"; fi
