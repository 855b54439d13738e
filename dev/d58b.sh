#!/usr/bin/env bash
# Fifty-eighth session, device call 2 (~5 min; carry build-n58): NVFP4's rows folded once into fp16
# (A16) on the 128-row tile. N's test_tiles and test_split (default backends, then split and mega),
# the kernel lab's A16 tiles (-DLAB_T512 -DFR_LAB_ACT16, NVFP4 now among them: rs_tile_H2), then
# the paired A / B of A = ad37126 (main before) and N (scripts/ab.sh 2) on NVFP4.
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
for b in test_tiles test_split moe_ep_A moe_ep_N rs_tile_H2; do carried build-n58/$b || exit 1; done
timeout 200 build-n58/test_tiles > $O/tiles.log 2>&1; echo "test_tiles rc=$? $(tail -1 $O/tiles.log)"
timeout 200 build-n58/test_split > $O/split.log 2>&1; echo "test_split rc=$? $(tail -1 $O/split.log)"
MOE_EP_TEST_BACKENDS=split,mega timeout 250 build-n58/test_split > $O/split_mega.log 2>&1
echo "test_split (split, mega) rc=$? $(tail -1 $O/split_mega.log)"
grep -h -m8 -B2 -A3 FAIL $O/tiles.log $O/split.log $O/split_mega.log
echo "tests $(( $(date +%s) - t0 )) s"
[ "${SKIP_LAB:-0}" = 1 ] || { timeout 100 build-n58/rs_tile_H2 > $O/lab_H2.txt 2>&1; echo "== lab H2 rc=$?"
  grep "cyc" $O/lab_H2.txt | sed 's/ *E [0-9].*rows K *[0-9]*://; s/GB\/s of weights.*fp16 peak//; s/(barrier.*//' | cut -c1-150; }
scripts/ab.sh 2 build-n58/moe_ep_A build-n58/moe_ep_N -- ${AB_ARGS:---paths nvfp4 --backends split,mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens 512,2048,8192 --iters 10} 2>&1 | tail -30
echo "d58b $(( $(date +%s) - t0 )) s"
