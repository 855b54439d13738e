#!/usr/bin/env bash
# The 144-row drafts merged (main at 79251ac + dev/drafts/mega_nv144.patch + mega_mx144.patch, the raw weight
# stages' fix 9c1b94e and the A16 MX producer's barrier 79251ac in): their GPU suite first, then paired A / Bs.
#   CI machine (~8 min): build-x74/ (ignored): moe_ep_A.gz (main's tool), moe_ep_B.gz and the six GPU tests
#     of the merged tree, each gzipped (a worktree with both patches applied, cmake Release, guard on)
#   dev/merge144.sh     device (carry build-x74, 57 MB; ~5 min): the suite (dev/gpu_suite_carried.sh, logs as
#                       suite_logs.tgz), then A / B of NVFP4 mega at flash / pro T = 2048 / 8192 and of MXFP8 /
#                       W4A8 at T = 2048, each A / B's bench tables (floors) kept as one tgz. AB_S: each A / B's limit (s).
#   TABLES=1 dev/merge144.sh   the same, then issue #4's tables of B where the suite passed (~9 min in all)
set -uo pipefail
cd "$(dirname "$0")/.."
D=build-x74
. scripts/carried.sh
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
dev/gpu_suite_carried.sh $D > $O/suite.txt 2>&1; tail -12 $O/suite.txt; echo "suite $(( $(date +%s) - t0 )) s"
for b in moe_ep_B moe_ep_A; do carried $D/$b || exit 1; done
ab() { # NAME [bench args]
  local n=$1; shift
  timeout ${AB_S:-110} scripts/ab.sh 2 $D/moe_ep_A $D/moe_ep_B -- --backends mega --iters 10 "$@" > $O/$n.txt 2>&1
  echo "$n rc=$? $(( $(date +%s) - t0 )) s"; tail -8 $O/$n.txt
  (cd $O && tar czf ${n}_md.tgz r*_?.md && rm -f r*_?.md) # at most 8 files come back from $OUT
}
ab ab_nv --paths nvfp4 --geometry ds-v4-flash,ds-v4-pro --tokens 2048,8192
ab ab_mx --paths mxfp8,w4a8 --geometry ds-v4-flash,ds-v4-pro --tokens 2048
# TABLES=1: then, where the suite passed, issue #4's tables of B (dev/issue4_run.sh: ~350 s; tables.tgz)
if [ "${TABLES:-0}" = 1 ] && grep -q " 0 failed" $O/suite.txt; then
  ISSUE4_LIMITS="${ISSUE4_LIMITS:-120 200 110}" dev/issue4_run.sh $D/moe_ep_B
fi
rm -f $O/suite.txt
