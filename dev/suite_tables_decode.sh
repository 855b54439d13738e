#!/usr/bin/env bash
# device (~450 s): build on the device, the whole ctest suite (GPU tests included), then issue #4's
# slice table (every path, T = 8 .. 8192) and the emulated EP8 groups' decode cells (quantized
# paths, T = 8, 64), with nvidia-smi's clock and power sampled. Files under $OUT.
#   dev/suite_tables_decode.sh   (forty-third session: the register tile's paired instances)
# R8_GEOS="ds-v4-flash" limits the emulated groups to those geometries (the call's 600 s).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
t0=$(date +%s); C=$(git rev-parse --short HEAD)
cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release > $OUT/cfg.log 2>&1 && cmake --build build-device -j16 > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 )) s"
ctest --test-dir build-device --output-on-failure -j4 -E valgrind > $OUT/ctest.log 2>&1; grep -E "tests passed|passed, .* failed|FAIL" $OUT/ctest.log | head -20; echo "ctest $(( $(date +%s)-t0 )) s"
B=build-device/tools/moe_ep; A="--backends split,mega --iters 20 --warmup 3"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant --format=csv,noheader -lms 200 > $OUT/smi.csv 2>/dev/null & smi=$!
MOE_EP_COMMIT=$C timeout 130 $B bench --out $OUT/slice.md --paths bf16,mxfp8,w4a8,nvfp4,fp8_block --tokens 8,64,512,2048,8192 $A > $OUT/slice.log 2>&1; echo "slice rc=$? $(( $(date +%s)-t0 )) s"
for g in ${R8_GEOS:-ds-v4-flash ds-v4-pro}; do MOE_EP_COMMIT=$C timeout 70 $B bench --ranks 8 --geometry $g --out $OUT/r8_$g.md --paths mxfp8,w4a8,nvfp4,fp8_block --tokens 8,64 $A > $OUT/r8_$g.log 2>&1; echo "r8 $g rc=$? $(( $(date +%s)-t0 )) s"; done
kill $smi; grep -h "TFLOP\|copy" $OUT/slice.md | head -4
