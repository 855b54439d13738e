#!/usr/bin/env bash
# device (~3 min; carry build-ab53): the fifty-third session's two drafts, tested and timed against main:
# B = the register tile's pending release after the second stage's TMA (mega), C = B + W4A8's 128-row
# tile with 3 raw stages (split and mega). moe_ep_A = main's kernels (6e3d03d).
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
D=build-ab53; O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
for b in moe_ep_A moe_ep_B moe_ep_C test_split_B test_split_C; do carried $D/$b || exit 1; done
for v in B C; do
  MOE_EP_TEST_BACKENDS=split,mega timeout 60 $D/test_split_$v > $O/ts_$v.log 2>&1; rc=$?
  echo "test_split $v (split, mega) rc=$rc $(tail -1 $O/ts_$v.log)"; [ $rc -eq 0 ] || grep -h -B2 -A4 FAIL $O/ts_$v.log | head -20
done
timeout 150 scripts/ab.sh 1 $D/moe_ep_A $D/moe_ep_B $D/moe_ep_C -- --paths mxfp8,w4a8 --backends split,mega \
  --geometry ds-v4-flash --tokens 512,8192 --iters 10 2>&1 | tail -12
