#!/usr/bin/env bash
# Drafts mega_nv144 + mega_mx144 (dev/drafts/: the A16 register tiles of NVFP4, then MXFP8 and W4A8 too,
# at 144 rows in mega above 128 rows an expert) and the tile lab that prices them (dev/wgmma_lab/rs_tile.cu,
# LAB_T2048 / LAB_W144 / LAB_W144_MX, built from the drafts' tree). Run once in the sixty-seventh session:
# MXFP8 / W4A8 wrong at 144 rows (their weight stages off 1024-aligned, fixed in 9c1b94e; not run since).
#   dev/nv144.sh build   CI machine (~6 min on 2 cores): build-x72/ (ignored): moe_ep_A (main's tool),
#                        moe_ep_B, test_split_B, test_fuzz_gpu_B (both drafts; dev/build_carry.sh, gzipped),
#                        rs_tile_a16; build-x73/ (ignored): the drafts' other four GPU tests, gzipped
#   dev/nv144.sh         device (carry build-x72 and build-x73, ~58 MB; ~3 min: 154 s on an H100), in order of value: paired
#                        A / B of NVFP4 mega at flash / pro T = 2048 / 8192 and of MXFP8 / W4A8 at T = 2048;
#                        the drafts' whole GPU suite (dev/gpu_suite_carried.sh build-x73: test_split with split
#                        and mega among it, bit for bit); the lab.
#                        AB_S, LAB_S: the A / B's (each of its two) and the lab's time limits in seconds (110, 60).
#   dev/nv144.sh split   device (carry build-x72; ~1-2 min): the drafts' test_split with split and mega alone, its
#                        FAIL lines (where the whole run's suite fails: its logs also come back as suite_logs.tgz).
set -uo pipefail
cd "$(dirname "$0")/.."
D=build-x72 S=build-x73 WT=/tmp/moe_ep_wt/B # dev/build_carry.sh's worktree of variant B
if [ "${1:-}" = build ]; then
  dev/build_carry.sh $D test_split,test_fuzz_gpu -- B=mega_nv144.patch+mega_mx144.patch || exit 1
  mkdir -p $S; for t in test_tiles test_nccl test_device_codec test_tile_wait; do
    cmake --build $WT/build -j2 --target $t > /dev/null && gzip -c $WT/build/tests/$t > $S/$t.gz || exit 1
  done
  (cd $WT/dev/wgmma_lab && /usr/local/cuda/bin/nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 -I../../include \
    -I../../src -DFR_LAB_ACT16 -DLAB_T512 -DLAB_T2048 -DLAB_W144 -DLAB_W144_MX rs_tile.cu -o $OLDPWD/$D/rs_tile_a16)
  exit
fi
. scripts/carried.sh
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
if [ "${1:-}" = split ]; then # the drafts' test_split with split and mega alone (~1-2 min; carry build-x72): its failing cases
  carried $D/test_split_B || exit 1
  timeout 240 env MOE_EP_TEST_BACKENDS=split,mega $D/test_split_B > $O/test_split_mega.log 2>&1; echo "test_split (split, mega) rc=$?"
  echo "FAIL lines: $(grep -c FAIL $O/test_split_mega.log)"; grep FAIL $O/test_split_mega.log | sed 's/.*test_split.c:[0-9]*: //' | cut -c1-200 | head -40
  tail -2 $O/test_split_mega.log; exit
fi
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
for b in moe_ep_B moe_ep_A; do carried $D/$b || exit 1; done
timeout ${AB_S:-110} scripts/ab.sh 2 $D/moe_ep_A $D/moe_ep_B -- --paths nvfp4 --backends mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens 2048,8192 --iters 10 > $O/ab.txt 2>&1
echo "ab nvfp4 rc=$? $(( $(date +%s) - t0 )) s"; tail -8 $O/ab.txt
(cd $O && tar czf ab_nv_md.tgz r*_?.md && rm -f r*_?.md) # the NVFP4 runs' tables (floors) before the MX A / B writes its own
timeout ${AB_S:-110} scripts/ab.sh 2 $D/moe_ep_A $D/moe_ep_B -- --paths mxfp8,w4a8 --backends mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens 2048 --iters 10 > $O/ab_mx.txt 2>&1
echo "ab mxfp8,w4a8 rc=$? $(( $(date +%s) - t0 )) s"; tail -8 $O/ab_mx.txt
(cd $O && tar czf ab_mx_md.tgz r*_?.md && rm -f r*_?.md) # at most 8 files come back from $OUT
cp $D/test_split_B.gz $S/test_split.gz; cp $D/test_fuzz_gpu_B.gz $S/test_fuzz_gpu.gz
dev/gpu_suite_carried.sh $S 2>&1 | tail -12; echo "suite $(( $(date +%s) - t0 )) s"
timeout ${LAB_S:-60} $D/rs_tile_a16 > $O/lab.txt 2>&1; echo "lab rc=$? $(( $(date +%s) - t0 )) s"
grep -v "producer per tile" $O/lab.txt | sed -e 's/GB\/s of weights.*of fp16 peak//' | cut -c1-190
