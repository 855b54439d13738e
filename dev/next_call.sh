#!/usr/bin/env bash
# seventy-third session's call (~7 min): the consumer-shape lab's MXFP8 lines (dev/wgmma_lab/rs_nv_wide.cu,
# its multiplier rows now 4-byte aligned), mega's item traces (dev/trace_items.sh) at the cells nearest
# issue #4's targets, each beside the forward timed between events, then issue #4's emulated EP8 tables
# (dev/issue4_run.sh, slice skipped), from binaries built on the CI machine and carried in D:
#   mkdir -p D; (cd dev/wgmma_lab && nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 \
#     -I../../include -I../../src rs_nv_wide.cu -o ../../D/rs_nv_wide)
#   a -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF build's tools/moe_ep gzipped as D/moe_ep_T.gz
#   main's tools/moe_ep gzipped as D/moe_ep_A.gz
#   D=D [TABLES=0] bash dev/next_call.sh      (carry D; $OUT: traces.tgz, tables.tgz, trace_summary.txt)
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
D=${D:?carry dir}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 60 $D/rs_nv_wide > /dev/null; timeout 60 $D/rs_nv_wide | grep -E "MXFP8|n128, NVFP4|n256, NVFP4 fragments, ring 4"
TRACE_BIN=$D/moe_ep_T timeout 200 bash dev/trace_items.sh ${CELLS:-nvfp4:ds-v4-flash:2048 nvfp4:ds-v4-pro:2048 \
  bf16:ds-v4-flash:2048 nvfp4:ds-v4-flash:8192 fp8_block:ds-v4-flash:8 mxfp8:ds-v4-flash:8 mxfp8:ds-v4-flash:64} \
  > $OUT/trace_summary.txt 2>&1
grep -h "mega timeline" $OUT/log_* 2>/dev/null
tar -C $OUT -czf $OUT/traces.tgz $(cd $OUT && ls dump_* log_* 2>/dev/null) && rm -f $OUT/dump_* $OUT/log_*
# issue4_run.sh writes $OUT/tables.tgz itself (do not tar over it)
[ "${TABLES:-1}" = 0 ] || ISSUE4_LIMITS="0 230 110" bash dev/issue4_run.sh $D/moe_ep_A 2>&1 | tail -12
ls -la $OUT
