#!/usr/bin/env bash
# device, one call (~330 s; carry build-carry). Needs build-carry/moe_ep.gz and
# build-carry/cublas_lab built on the CI machine (free):
#   cmake -S . -B /tmp/b -DCMAKE_BUILD_TYPE=Release -DMOE_EP_WITH_CUDA=ON
#   cmake --build /tmp/b -j2 --target moe_ep_tool && mkdir -p build-carry && gzip -c /tmp/b/tools/moe_ep > build-carry/moe_ep.gz
#   (cd dev/wgmma_lab && nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -I../../tools \
#      -o ../../build-carry/cublas_lab cublas_grouped.cu ../../tools/synth.c -lcublas)
# 1. cuBLAS on the slice's bf16 GEMMs (dev/wgmma_lab/cublas_grouped.cu), the yardstick for
#    issue #4's bf16 cells above T = 512, and the bench's bf16 cells beside it (same call).
#    Predicted at flash 2048: cuBLAS dense 620-660 TFLOP/s, batched (equal experts) 550-620,
#    grouped (real rows) 450-550, loop 350-450; mega fwd 1.2-1.4x dense, 1.05-1.25x batched.
# 2. design.md "Next" 1: the register tile's rows per backend at the emulated EP8 pro group,
#    T = 512, MXFP8 and W4A8. Predicted: mega 64 / mega 128 0.97-1.03, split 64 / 128 0.98-1.05.
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
B=build-carry/moe_ep
carried "$B" || exit 1
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
{ build-carry/cublas_lab flash 512 2048 8192; build-carry/cublas_lab pro 512 2048 8192; } 2>&1 | tee $O/cublas.txt
echo "cublas $(( $(date +%s) - t0 )) s"
$B bench --paths bf16 --backends split,mega --tokens 512,2048,8192 --iters 20 --warmup 3 --out $O/bf16.md > $O/bf16.log 2>&1
cat $O/bf16.md | grep -v '^$' | tail -12
echo "bench $(( $(date +%s) - t0 )) s"
TILE_SWEEP_GEOS=ds-v4-pro TILE_SWEEP_T_PRO=512 TILE_SWEEP_ROWS="heur 64 128" \
  timeout 200 bash dev/tile_rows_sweep.sh $B --ranks 8 --backends split,mega --paths mxfp8,w4a8
echo "total $(( $(date +%s) - t0 )) s"
