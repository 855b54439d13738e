#!/usr/bin/env bash
# One call on the GPU machine: build, run the whole test suite (GPU tests
# included), optionally the bench, and print a short summary last.
#   scripts/device.sh [test|bench|testbench|all] [extra bench args...]  (all = test + demo + bench)
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
what=${1:-all}; shift || true
out=${OUT:-/tmp/moe_ep_out}; mkdir -p "$out"
export MOE_EP_COMMIT=${MOE_EP_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,clocks.sm,memory.used --format=csv,noheader | tee "$out/gpu.txt"
t0=$(date +%s)
cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DMOE_EP_WITH_CUDA=ON >"$out/configure.log" 2>&1 \
  && cmake --build build-device -j16 >"$out/build.log" 2>&1
build_rc=$?
tail -n 20 "$out/build.log"
echo "build rc=$build_rc in $(( $(date +%s) - t0 )) s"
test_line="(tests not run)"
if [ $build_rc -eq 0 ] && [ "$what" != bench ]; then
  ctest --test-dir build-device --output-on-failure -j4 -E valgrind 2>&1 | tee "$out/ctest.log" | tail -n 60
  test_line=$(grep -E "tests passed|tests failed" "$out/ctest.log" | tail -n1)
  # again for their logs (ctest keeps a passing test's output to itself): pass counts, large offsets
  for t in build-device/tests/test_split*; do [ -x "$t" ] && "$t" >"$out/$(basename $t).log" 2>&1; done
  grep -h "large offsets" "$out"/test_split*.log | tail -n 2
fi
demo_line="(demo not run)"
if [ $build_rc -eq 0 ] && [ "$what" = all ]; then  # the demo: "all" only
  build-device/tools/moe_ep run 2>&1 | tee "$out/demo.log" | tail -n 8
  demo_line=$(grep -E "relative L2|FAILED" "$out/demo.log" | tail -n1)
fi
bench_line="(bench not run)"
if [ $build_rc -eq 0 ] && [ "$what" != test ] && [ -x build-device/tools/moe_ep ]; then
  build-device/tools/moe_ep bench --out "$out/bench.md" "$@" 2>&1 | tee "$out/bench.log" | tail -n 40
  bench_line="bench rc=${PIPESTATUS[0]}"
fi
if [ $build_rc -eq 0 ] && command -v cuobjdump >/dev/null; then
  echo "SASS matrix instructions in libmoe_ep.a:" | tee "$out/sass.txt"
  cuobjdump --dump-sass build-device/libmoe_ep.a 2>/dev/null | grep -oE '\b(HGMMA|QGMMA|HMMA|QMMA|IMMA)[.A-Z0-9]*' | sort | uniq -c | tee -a "$out/sass.txt"
  echo "local memory (LDL/STL) in libmoe_ep.a: $(cuobjdump --dump-sass build-device/libmoe_ep.a 2>/dev/null | grep -cE '\b(LDL|STL)\b')" | tee -a "$out/sass.txt"
fi
echo "==== summary ===="
cat "$out/gpu.txt"; echo "build rc=$build_rc"; echo "$test_line"; echo "demo: $demo_line"; echo "$bench_line"
grep -hE "passed, .* failed" "$out"/*.log 2>/dev/null | tail -n 8
cat "$out/sass.txt" 2>/dev/null
