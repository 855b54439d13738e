#!/usr/bin/env bash
# device (~60-80 s a run): the bench's two L2 flushes against each other, the same binary:
# `--flush read` (reads of 2 x L2 bytes, the default since 2026-12-04) and `--flush memset`
# (before: the memset's last ~L2 bytes stay dirty and are written back inside the timed call).
#   dev/flush_ab.sh ROUNDS [moe_ep bench args...]    e.g. dev/flush_ab.sh 2 --paths bf16 --tokens 8,64
# Needs build-carry/moe_ep_F(.gz), a moe_ep with --flush. Prints bench_compare.py's table (B = memset).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
. scripts/carried.sh
bin=build-carry/moe_ep_F
carried "$bin" || { echo "no $bin"; exit 1; }
out=${OUT:-/tmp/moe_ep_out}; mkdir -p "$out"
rounds=$1; shift
for r in $(seq 1 "$rounds"); do
  for f in read memset; do
    "$bin" bench --flush $f --out "$out/r${r}_$f.md" "$@" > "$out/log_r${r}_$f.txt" 2>&1 || echo "bench $f round $r failed"
  done
done
python3 scripts/bench_compare.py "$out"/r*_read.md -- "$out"/r*_memset.md
