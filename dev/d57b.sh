#!/usr/bin/env bash
# Fifty-seventh session's second device call (carry build-d57): M = this tree's A16 form for both
# backends (split's fold pass; mega's fold items, mega_fold.cuh), against A (main) and S (split's
# fold only, dev/drafts/split_act16.patch). Tests: M's test_tiles and test_split (split, mega;
# knobs_same_bytes compares the 16-row tiles, which widen, with the 128-row A16 tiles). Then the A / B
# on mxfp8 / w4a8, split and mega, flash / pro, T = 512 / 2048 / 8192. Build (CI machine):
# cmake -S . -B build-m57 -DCMAKE_BUILD_TYPE=Release && cmake --build build-m57 -j2 --target
# moe_ep_tool test_split test_tiles; gzip -c each into build-d57/{moe_ep,test_split,test_tiles}_M.gz.
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O; D=build-d57
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
for b in moe_ep_A moe_ep_S moe_ep_M test_tiles_M test_split_M; do carried $D/$b || exit 1; done
timeout 200 $D/test_tiles_M > $O/tiles_M.log 2>&1; echo "test_tiles M rc=$? $(tail -1 $O/tiles_M.log)"
MOE_EP_TEST_BACKENDS=split,mega timeout 300 $D/test_split_M > $O/split_M.log 2>&1
echo "test_split M (split, mega) rc=$? $(tail -1 $O/split_M.log)"
grep -m5 -B2 -A3 "FAIL\|DIFFER" $O/tiles_M.log $O/split_M.log | head -30
echo "tests $(( $(date +%s) - t0 )) s"
scripts/ab.sh 2 $D/moe_ep_A $D/moe_ep_S $D/moe_ep_M -- --paths mxfp8,w4a8 --backends split,mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens ${TOKENS:-512,2048,8192} --iters 10 2>&1 | tail -40
echo "d57b $(( $(date +%s) - t0 )) s"
