#!/usr/bin/env bash
# Fifty-eighth session, device call 4 (~6 min; carry build-f58): FP8-BLOCK's rows folded once into fp16
# (A16) on the 128-row tile (its scales staged per stage by warps 1-3, fr_produce_scales). F's test_tiles
# and test_split (default backends, then split and mega), the lab's A16 tiles (-DLAB_T512 -DFR_LAB_ACT16:
# rs_tile_H3), the paired A / B of N = dfe69bd and F on FP8-BLOCK, then (F's tests passed) F's FP8-BLOCK
# rows of issue #4's tables (the slice, the emulated flash and pro groups) into $OUT/t3.tgz.
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
for b in test_tiles test_split moe_ep_N moe_ep_F rs_tile_H3; do carried build-f58/$b || exit 1; done
timeout 200 build-f58/test_tiles > $O/tiles.log 2>&1; r1=$?; echo "test_tiles rc=$r1 $(tail -1 $O/tiles.log)"
timeout 200 build-f58/test_split > $O/split.log 2>&1; r2=$?; echo "test_split rc=$r2 $(tail -1 $O/split.log)"
MOE_EP_TEST_BACKENDS=split,mega timeout 250 build-f58/test_split > $O/split_mega.log 2>&1; r3=$?
echo "test_split (split, mega) rc=$r3 $(tail -1 $O/split_mega.log)"
grep -h -m8 -B2 -A3 FAIL $O/tiles.log $O/split.log $O/split_mega.log
echo "tests $(( $(date +%s) - t0 )) s"
timeout 60 build-f58/rs_tile_H3 > $O/lab_H3.txt 2>&1; echo "== lab H3 rc=$?"
grep "cyc" $O/lab_H3.txt | grep fp8 | sed 's/ *E [0-9].*rows K *[0-9]*://; s/GB\/s of weights.*fp16 peak//; s/(barrier.*//' | cut -c1-150
scripts/ab.sh 2 build-f58/moe_ep_N build-f58/moe_ep_F -- --paths fp8_block --backends split,mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens 512,2048,8192 --iters 10 2>&1 | tail -14
echo "ab $(( $(date +%s) - t0 )) s"
[ $r1 = 0 ] && [ $r2 = 0 ] && [ $r3 = 0 ] || exit 1
A="--paths fp8_block --backends split,mega --tokens 8,64,512,2048,8192 --iters 20 --warmup 3"
mkdir -p $O/t3
export MOE_EP_COMMIT=${MOE_EP_COMMIT:-F}
timeout 60 build-f58/moe_ep_F bench --out $O/t3/slice.md $A > $O/t3/slice.log 2>&1; echo "slice rc=$?"
timeout 70 build-f58/moe_ep_F bench --ranks 8 --geometry ds-v4-pro --out $O/t3/r8_pro.md $A > $O/t3/r8_pro.log 2>&1; echo "r8 pro rc=$?"
timeout 60 build-f58/moe_ep_F bench --ranks 8 --geometry ds-v4-flash --out $O/t3/r8_flash.md $A > $O/t3/r8_flash.log 2>&1; echo "r8 flash rc=$?"
tar -C $O -czf $O/t3.tgz t3 && rm -rf $O/t3
echo "d58c $(( $(date +%s) - t0 )) s"
