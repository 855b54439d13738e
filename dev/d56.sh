#!/usr/bin/env bash
# Fifty-sixth session's device call (carry build-d56b): a third fp16 stage for the MX 128-row
# tiles. B = MXFP8 (2 activation + 2 weight + 3 fp16 stages, dev/drafts/rs_tile_mxfp8_cvt3.patch),
# W = B + W4A8 with 3 fp16 stages (rs_tile_mx_cvt3.patch): W's test_tiles / test_split (split,
# mega; W holds B's MXFP8 code), then the paired A / B of A (main), B, W. Build (CI machine, ~13 min):
# dev/build_carry.sh build-d56b test_split,test_tiles -- B=rs_tile_mxfp8_cvt3.patch W=rs_tile_mx_cvt3.patch,
# then move build-d56b/test_*_B.gz elsewhere (the carry's 64 MiB).
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O; D=build-d56b
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
for b in moe_ep_A moe_ep_B moe_ep_W test_tiles_W test_split_W; do carried $D/$b || exit 1; done
timeout 200 $D/test_tiles_W > $O/tiles_W.log 2>&1; echo "test_tiles W rc=$? $(tail -1 $O/tiles_W.log)"
MOE_EP_TEST_BACKENDS=split,mega timeout 300 $D/test_split_W > $O/split_W.log 2>&1
echo "test_split W (split, mega) rc=$? $(tail -1 $O/split_W.log)"
grep -m3 -A3 FAIL $O/tiles_W.log $O/split_W.log
echo "tests $(( $(date +%s) - t0 )) s"
scripts/ab.sh 2 $D/moe_ep_A $D/moe_ep_B $D/moe_ep_W -- --paths mxfp8,w4a8 --backends split,mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens 512,8192 --iters 10 2>&1 | tail -40
echo "d56 $(( $(date +%s) - t0 )) s"
