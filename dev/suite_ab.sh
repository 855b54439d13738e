#!/usr/bin/env bash
# device (~3-4 min): the GPU suite of a tree built on the CI machine (dev/gpu_suite_carried.sh
# SUITE_DIR), then the paired A / B of carried moe_ep binaries (scripts/ab.sh 2), in one call.
#   dev/suite_ab.sh SUITE_DIR BIN_A BIN_B [BIN_C] -- [moe_ep bench args]   (carry both folders)
# Fifty-seventh session (the fold's merge): build-s57 with build-d57/moe_ep_A / moe_ep_M2 -- --paths
# mxfp8,w4a8 --backends split,mega --geometry ds-v4-flash,ds-v4-pro --tokens 512,2048,8192 --iters 10;
# then build-s57 with moe_ep_M2 / moe_ep_M3 and --backends mega.
# Build: cmake --build B --target moe_ep_tool test_split test_tiles test_device_codec test_fuzz_gpu
# test_tile_wait test_nccl; gzip each test into SUITE_DIR/, each tool as a BIN.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
[ $# -ge 4 ] || { sed -n '2,9p' "$0"; exit 2; }
suite=$1; shift
t0=$(date +%s)
dev/gpu_suite_carried.sh "$suite"
echo "suite $(( $(date +%s) - t0 )) s"
scripts/ab.sh 2 "$@" 2>&1 | tail -40
echo "suite_ab $(( $(date +%s) - t0 )) s"
