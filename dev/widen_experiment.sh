#!/usr/bin/env bash
# Kernel lab: the fp16 widening tile for NVFP4, MXFP8 and W4A8 (f16_widen_tile.cuh,
# built only with -DMOE_EP_WIDEN_EXPERIMENT). One device call: build that variant
# in build-widen/, run the GPU tests that compare it with the mma.sync tiles byte
# for byte (test_split: knobs {16,x} vs {64,x}, mega vs split; test_tiles) and
# the reference, then bench the three paths. Summary last.
#   dev/widen_experiment.sh [extra bench args]
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
out=${OUT:-/tmp/moe_ep_out}; mkdir -p "$out"
flags=-DMOE_EP_WIDEN_EXPERIMENT
cmake -S . -B build-widen -DCMAKE_BUILD_TYPE=Release -DMOE_EP_WITH_CUDA=ON -DCMAKE_CUDA_FLAGS=$flags \
  -DCMAKE_C_FLAGS=$flags >"$out/widen_configure.log" 2>&1 &&
  cmake --build build-widen -j16 --target test_split test_tiles moe_ep_tool >"$out/widen_build.log" 2>&1
echo "build rc=$?"
timeout 200 build-widen/tests/test_split >"$out/widen_test_split.log" 2>&1; echo "test_split rc=$?"
timeout 100 build-widen/tests/test_tiles >"$out/widen_test_tiles.log" 2>&1; echo "test_tiles rc=$?"
timeout 240 build-widen/tools/moe_ep bench --paths nvfp4,mxfp8,w4a8 --backends split,mega --iters 10 --warmup 2 \
  --out "$out/widen_bench.md" "$@" >"$out/widen_bench.log" 2>&1; echo "bench rc=$?"
echo "==== summary ===="
grep -h "FAIL" "$out"/widen_test_*.log | head -n 12
tail -qn 1 "$out/widen_test_split.log" "$out/widen_test_tiles.log"
grep -E "^\| ds-v4" "$out/widen_bench.md" | cut -c1-200
