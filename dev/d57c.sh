#!/usr/bin/env bash
# Fifty-seventh session's third device call (carry build-s57 build-d57): the GPU suite of this tree
# (dev/gpu_suite_carried.sh build-s57), then the paired A / B of A (main before the fold, 433237d)
# and M2 (this tree: the fold gated by moe_ep_a16_rows) on mxfp8 / w4a8, split and mega, flash / pro,
# T = 512 / 2048 / 8192. Build (CI machine): cmake --build B --target moe_ep_tool test_split
# test_tiles test_device_codec test_fuzz_gpu test_tile_wait test_nccl; gzip the tests into
# build-s57/, the tool into build-d57/moe_ep_M2.gz (moe_ep_A.gz: dev/build_carry.sh's A of 433237d).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
t0=$(date +%s)
dev/gpu_suite_carried.sh build-s57
echo "suite $(( $(date +%s) - t0 )) s"
scripts/ab.sh 2 build-d57/moe_ep_A build-d57/moe_ep_M2 -- --paths mxfp8,w4a8 --backends split,mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens ${TOKENS:-512,2048,8192} --iters 10 2>&1 | tail -30
echo "d57c $(( $(date +%s) - t0 )) s"
