#!/usr/bin/env bash
# Fifty-eighth session, device call 8 (~4 min; carry build-g58): MXFP8 at one m tile an expert in
# mega's mixed form (D: GEMM1 on the dispatch's fp16 rows, GEMM2 widening; d.a16 = 2). D's test_tiles
# and test_split with split and mega, then the paired A / B of F = 11149ea and D, mega, MXFP8 at
# T = 512 (the mixed form) and 2048 (A16 as before: a check).
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
for b in test_split test_tiles moe_ep_F moe_ep_D; do carried build-g58/$b || exit 1; done
timeout 200 build-g58/test_tiles > $O/tiles.log 2>&1; echo "test_tiles rc=$? $(tail -1 $O/tiles.log)"
MOE_EP_TEST_BACKENDS=split,mega timeout 250 build-g58/test_split > $O/split_mega.log 2>&1
echo "test_split (split, mega) rc=$? $(tail -1 $O/split_mega.log)"
grep -h -m8 -B2 -A3 FAIL $O/tiles.log $O/split_mega.log
scripts/ab.sh 2 build-g58/moe_ep_F build-g58/moe_ep_D -- ${AB_ARGS:---paths mxfp8 --backends mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens 512,2048 --iters 20} 2>&1 | tail -10
echo "d58f $(( $(date +%s) - t0 )) s"
