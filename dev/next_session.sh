#!/usr/bin/env bash
# device, one call (~150 s; carry build-carry): design.md "Next" 1. The register tile's rows per
# backend at the emulated EP8 pro group, T = 512 (64 rows an expert on average; the heuristic
# takes 128 from 60), MXFP8 and W4A8, split and mega: the heuristic against forced 64 and 128.
# Predicted: mega 64 / mega 128 0.97-1.03, split 64 / split 128 0.98-1.05.
# Needs build-carry/moe_ep.gz, built on the CI machine (free, ~6 min):
#   cmake -S . -B /tmp/b -DCMAKE_BUILD_TYPE=Release -DMOE_EP_WITH_CUDA=ON
#   cmake --build /tmp/b -j2 --target moe_ep_tool && mkdir -p build-carry && gzip -c /tmp/b/tools/moe_ep > build-carry/moe_ep.gz
set -uo pipefail
cd "$(dirname "$0")/.."
B=build-carry/moe_ep
[ -x $B ] || { gunzip -kf $B.gz && chmod +x $B; } || exit 1
t0=$(date +%s)
TILE_SWEEP_GEOS=ds-v4-pro TILE_SWEEP_T_PRO=512 TILE_SWEEP_ROWS="heur 64 128" \
  bash dev/tile_rows_sweep.sh $B --ranks 8 --backends split,mega --paths mxfp8,w4a8
echo "total $(( $(date +%s) - t0 )) s"
