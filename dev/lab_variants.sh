#!/usr/bin/env bash
# device (~20 s a binary): kernel lab binaries (dev/wgmma_lab/rs_tile.cu, built on the CI machine,
# carried gzipped), each run once, its per-tile lines (us, GB/s, cycles: tile, stage, fill, waits,
# K loop, epilogue) printed short.
#   dev/lab_variants.sh BIN [BIN ...]
# Fifty-eighth session: build-d58/lab/rs_tile_{A,H,S} (-DLAB_T512; H -DFR_LAB_ACT16, S -DFR_LAB_SKIP_WIDEN).
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
for b in "$@"; do
  carried "$b" || exit 1
  timeout 150 "$b" > $O/lab_$(basename "$b").txt 2>&1; echo "== $b rc=$?"
  grep "cyc" $O/lab_$(basename "$b").txt | sed 's/ *E [0-9].*rows K *[0-9]*://; s/GB\/s of weights.*fp16 peak//; s/(barrier.*//' | cut -c1-150
done
