#!/usr/bin/env bash
# Fifty-seventh session's last device call (carry build-s57 build-d57): the GPU suite of this tree
# (mega's dispatch folds GEMM1's rows: no fold1 items where it is staged; act16 only where a forward
# can fold), then the paired A / B of M2 (7926bea, fold1 items) and M3 (this tree) on mxfp8 / w4a8
# mega, flash / pro, T = 512 / 2048 / 8192. Build as dev/d57c.sh says (tool: build-d57/moe_ep_M3.gz).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
t0=$(date +%s)
dev/gpu_suite_carried.sh build-s57
echo "suite $(( $(date +%s) - t0 )) s"
scripts/ab.sh 2 build-d57/moe_ep_M2 build-d57/moe_ep_M3 -- --paths mxfp8,w4a8 --backends ${BACKENDS:-mega} \
  --geometry ds-v4-flash,ds-v4-pro --tokens ${TOKENS:-512,2048,8192} --iters 10 2>&1 | tail -14
echo "d57d $(( $(date +%s) - t0 )) s"
