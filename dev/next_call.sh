#!/usr/bin/env bash
# seventy-second session's planned call (~5 min; no device machine came for most of that session): the
# consumer-loop lab of the register tile's shapes (dev/wgmma_lab/rs_nv_wide.cu: today's two m64 blocks at
# n96 / n128 / n144 against one m64 block at n256, NVFP4 and MXFP8 fragments), then Nsight Compute's pipe,
# stall and L2 / DRAM figures of split's register-tile GEMMs at flash T = 512 and 8192 (the same tile as
# mega's; dev/ncu_pipes.sh), all from binaries built on the CI machine and carried in D:
#   mkdir -p D; (cd dev/wgmma_lab && nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -DMOE_EP_HAVE_CUDA=1 \
#     -I../../include -I../../src rs_nv_wide.cu -o ../../D/rs_nv_wide)
#   cmake --build build -j2 --target moe_ep_tool; gzip -c build/tools/moe_ep > D/moe_ep_A.gz
#   D=D [CELLS="nvfp4:512 nvfp4:8192"] bash dev/next_call.sh      (carry D)
cd "$(dirname "$0")/.."
. scripts/carried.sh
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
D=${D:?carry dir}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 60 $D/rs_nv_wide > /dev/null; timeout 60 $D/rs_nv_wide # the first run warms the clocks
carried $D/moe_ep_A || exit 1
export MOE_EP_BIN=$D/moe_ep_A
t0=$(date +%s)
for c in ${CELLS:-nvfp4:512 nvfp4:8192 mxfp8:512 w4a8:512 fp8_block:512}; do # PATH:T, ~40 s each
  timeout 100 bash dev/ncu_pipes.sh ${c%%:*} ${c##*:} ds-v4-flash split grouped_gemm 2 2>&1 |
    grep -E "==|duration|hmma|issue_active|xu|alu|fma|lsu|uniform|wavefronts|scoreboard|stalled_wait|barrier|math_pipe|mio|dispatch|selected|no_instr|branch|lts|dram" |
    sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//; s/.avg.pct_of_peak_sustained_(active|elapsed)//'
  echo "t=$(( $(date +%s) - t0 )) s"
done
