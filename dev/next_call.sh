#!/usr/bin/env bash
# seventy-fourth session's second call (~2 min): where the decode forward's start and end go, from a lab
# trace build of main (822acc7 plus two lab marks, compiled only with -DMOE_EP_MEGA_TRACE: the dispatch
# item's tw = its rows encoded and their bulk stores issued, its stall = those stores complete; the exit's
# tw = the exit count's round trip done, its stall = the last block's counters cleared), then the GPU
# suite at main (build-x91's tests, built at cc7e30a: main's src since). Binaries built on the CI machine:
#   L/moe_ep_L.gz: a git worktree of main with dev/drafts/lab_decode_marks.patch applied,
#     cmake -DCMAKE_BUILD_TYPE=Release -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF, its moe_ep_tool
#   L=L S=build-x91 bash dev/next_call.sh     (carry L and S; $OUT: traces.tgz, trace_summary.txt, suite.txt)
# The first call of the session (the decode-chain draft, dev/drafts/mega_decode_chain.patch: suite,
# paired A / B, traces) is in git history (dev/next_call.sh at cf6e737).
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
L=${L:?carry dir of the lab trace build}
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
t0=$(date +%s)
TRACE_BIN=$L/moe_ep_L timeout 150 bash dev/trace_items.sh ${CELLS:-fp8_block:ds-v4-flash:8 mxfp8:ds-v4-flash:8 nvfp4:ds-v4-pro:8 nvfp4:ds-v4-flash:2048} \
  > $OUT/trace_summary.txt 2>&1
grep -h "mega timeline" $OUT/log_* 2>/dev/null
tar -C $OUT -czf $OUT/traces.tgz $(cd $OUT && ls dump_* log_* 2>/dev/null) && rm -f $OUT/dump_* $OUT/log_*
echo "traces $(( $(date +%s)-t0 )) s"
[ -z "${S:-}" ] || { OUT=$OUT/suite timeout 240 bash dev/gpu_suite_carried.sh $S > $OUT/suite.txt 2>&1; tail -12 $OUT/suite.txt; rm -rf $OUT/suite; }
echo "all $(( $(date +%s)-t0 )) s"; ls $OUT
