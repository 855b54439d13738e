#!/usr/bin/env bash
# seventy-fourth session's call (~6 min): the forward's critical path at decode, shortened (the first
# claim's error load beside its atomic, no error-word round trips in the setup and the plan, a dispatch
# item's first rows loaded before the plan's wait, the combine's slot weights before its wait, the last
# block's counter clearing limited to the m tiles used): the GPU suite of B, a paired A / B of mega at
# T = 8 / 64 / 512, and B's item traces at three decode cells. Binaries built on the CI machine, in D:
#   D/moe_ep_A.gz  main's tools/moe_ep (the seventy-third session's build-x90/moe_ep_A.gz: 066a2c6)
#   D/moe_ep_B.gz  this tree with dev/drafts/mega_decode_chain.patch: tools/moe_ep (Release, ptxas guard on)
#   D/moe_ep_T.gz  the same with -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF (tools/moe_ep)
#   D/test_*.gz    its GPU tests (dev/gpu_suite_carried.sh's list; test_tiles left out: the carry limit)
#   AB_PATHS=fp8_block,mxfp8,nvfp4,w4a8 D=D bash dev/next_call.sh   (carry D; $OUT: suite.txt,
#     suite_logs.tgz, ab.txt, ab_md.tgz, traces.tgz, trace_summary.txt)
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
D=${D:?carry dir}
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
t0=$(date +%s)
[ "${SUITE:-1}" = 0 ] || { OUT=$OUT/suite timeout 300 bash dev/gpu_suite_carried.sh $D > $OUT/suite.txt 2>&1
  tail -12 $OUT/suite.txt; tar -C $OUT -czf $OUT/suite_logs.tgz suite && rm -rf $OUT/suite; echo "suite $(( $(date +%s)-t0 )) s"; }
OUT=$OUT/ab timeout 330 bash scripts/ab.sh 2 $D/moe_ep_A $D/moe_ep_B -- --paths ${AB_PATHS:-fp8_block,mxfp8,nvfp4,w4a8,bf16} \
  --backends mega --geometry ds-v4-flash,ds-v4-pro --tokens ${AB_TOKENS:-8,64,512} --iters 20 > $OUT/ab.txt 2>&1
cat $OUT/ab.txt | tail -40; tar -C $OUT -czf $OUT/ab_md.tgz ab && rm -rf $OUT/ab; echo "ab $(( $(date +%s)-t0 )) s"
TRACE_BIN=$D/moe_ep_T timeout 120 bash dev/trace_items.sh ${CELLS:-fp8_block:ds-v4-flash:8 mxfp8:ds-v4-flash:8 nvfp4:ds-v4-pro:8} \
  > $OUT/trace_summary.txt 2>&1
grep -h "mega timeline" $OUT/log_* 2>/dev/null
tar -C $OUT -czf $OUT/traces.tgz $(cd $OUT && ls dump_* log_* 2>/dev/null) && rm -f $OUT/dump_* $OUT/log_*
echo "all $(( $(date +%s)-t0 )) s"; ls $OUT
