#!/usr/bin/env bash
# Fifty-eighth session, device call 7 (~4 min; carry build-e58): FP8-BLOCK's paired 16-row decode tile in
# mega's A16 form (D). D's test_tiles and test_split with split and mega, then the paired A / B of
# F = 11149ea and D, mega, FP8-BLOCK at T = 8 / 64 (the 16-row tile) and 512 (unchanged: a check).
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
for b in test_split test_tiles moe_ep_F moe_ep_D; do carried build-e58/$b || exit 1; done
timeout 200 build-e58/test_tiles > $O/tiles.log 2>&1; echo "test_tiles rc=$? $(tail -1 $O/tiles.log)"
MOE_EP_TEST_BACKENDS=split,mega timeout 250 build-e58/test_split > $O/split_mega.log 2>&1
echo "test_split (split, mega) rc=$? $(tail -1 $O/split_mega.log)"
grep -h -m8 -B2 -A3 FAIL $O/tiles.log $O/split_mega.log
scripts/ab.sh 2 build-e58/moe_ep_F build-e58/moe_ep_D -- ${AB_ARGS:---paths fp8_block --backends mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens 8,64,512 --iters 20} 2>&1 | tail -10
echo "d58e $(( $(date +%s) - t0 )) s"
