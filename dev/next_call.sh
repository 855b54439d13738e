#!/usr/bin/env bash
# seventieth session's merge call (carry build-x77, built on the CI machine from main + dev/drafts/mega_rs144_rows.patch,
# ptxas guard on; ~8 min): the GPU suite of the merged tree, then issue #4's tables (the EP8 slice and the
# emulated flash group; ISSUE4_LIMITS as dev/issue4_run.sh, the pro group skipped by default: a call of its own).
#   bash dev/next_call.sh            (env: ISSUE4_LIMITS="125 0 120")
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
t0=$(date +%s)
OUT=$OUT/suite dev/gpu_suite_carried.sh build-x77 2>&1 | tail -12
(cd $OUT && tar czf suite.tgz suite && rm -rf suite)
echo "suite $(( $(date +%s) - t0 )) s"
ISSUE4_LIMITS=${ISSUE4_LIMITS:-"125 0 120"} dev/issue4_run.sh build-x77/moe_ep_B
echo "done $(( $(date +%s) - t0 )) s"
