#!/usr/bin/env bash
# Fifty-eighth session, device call 5 (~4 min; carry build-q58): mega's fold items in quarters of an m
# tile (MEGA_FOLD_PARTS 4; dev/drafts/mega_fold_quarters.patch redone on the four A16 forms). Q's
# test_split with split and mega (its unaligned case runs the fold1 items too), then the paired
# A / B of F = 11149ea and Q, mega only.
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
for b in test_split moe_ep_F moe_ep_Q; do carried build-q58/$b || exit 1; done
MOE_EP_TEST_BACKENDS=split,mega timeout 250 build-q58/test_split > $O/split_mega.log 2>&1
echo "test_split (split, mega) rc=$? $(tail -1 $O/split_mega.log)"
grep -h -m8 -B2 -A3 FAIL $O/split_mega.log
scripts/ab.sh 2 build-q58/moe_ep_F build-q58/moe_ep_Q -- ${AB_ARGS:---paths w4a8,nvfp4,fp8_block --backends mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens 512,8192 --iters 10} 2>&1 | tail -14
echo "d58d $(( $(date +%s) - t0 )) s"
