#!/usr/bin/env bash
# Draft mega_nv144 (dev/drafts/mega_nv144.patch: NVFP4's 144-row A16 register tile in mega above 128
# rows an expert) and the tile lab that prices it (dev/wgmma_lab/rs_tile.cu, LAB_T2048 / LAB_W144).
# Written in the sixty-fifth session, which got no device time to run it.
#   dev/nv144.sh build   CI machine (~6 min on 2 cores): build-x72/ (ignored): moe_ep_A (main's tool),
#                        moe_ep_B, test_split_B, test_fuzz_gpu_B (the draft's; dev/build_carry.sh, gzipped),
#                        rs_tile_a16; build-x73/ (ignored): the draft's other four GPU tests, gzipped
#   dev/nv144.sh         device (carry build-x72 and build-x73, ~58 MB; ~6 min), in order of value: paired
#                        A / B of NVFP4 mega at flash / pro T = 2048 / 8192; the draft's whole GPU suite
#                        (dev/gpu_suite_carried.sh build-x73: test_split with split and mega among it); the lab.
#                        AB_S, LAB_S: those parts' time limits in seconds (default 110, 80).
set -uo pipefail
cd "$(dirname "$0")/.."
D=build-x72 S=build-x73
if [ "${1:-}" = build ]; then # dev/build_carry.sh's A / B (gzipped), then the lab
  dev/build_carry.sh $D test_split,test_fuzz_gpu -- B=mega_nv144.patch || exit 1
  mkdir -p $S; for t in test_tiles test_nccl test_device_codec test_tile_wait; do
    cmake --build /tmp/moe_ep_wt/B/build -j2 --target $t > /dev/null && gzip -c /tmp/moe_ep_wt/B/build/tests/$t > $S/$t.gz || exit 1
  done
  (cd dev/wgmma_lab && /usr/local/cuda/bin/nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 \
    -I../../include -I../../src -DFR_LAB_ACT16 -DLAB_T512 -DLAB_T2048 -DLAB_W144 rs_tile.cu -o ../../$D/rs_tile_a16)
  exit
fi
. scripts/carried.sh
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
for b in moe_ep_B moe_ep_A; do carried $D/$b || exit 1; done
timeout ${AB_S:-110} scripts/ab.sh 2 $D/moe_ep_A $D/moe_ep_B -- --paths nvfp4 --backends mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens 2048,8192 --iters 10 > $O/ab.txt 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"; tail -8 $O/ab.txt
cp $D/test_split_B.gz $S/test_split.gz; cp $D/test_fuzz_gpu_B.gz $S/test_fuzz_gpu.gz
dev/gpu_suite_carried.sh $S 2>&1 | tail -12; echo "suite $(( $(date +%s) - t0 )) s"
timeout ${LAB_S:-80} $D/rs_tile_a16 > $O/lab.txt 2>&1; echo "lab rc=$? $(( $(date +%s) - t0 )) s"
grep -v "producer per tile" $O/lab.txt | sed -e 's/GB\/s of weights.*of fp16 peak//' | cut -c1-190
