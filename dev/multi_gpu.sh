#!/usr/bin/env bash
# One device call on a multi-GPU machine: build, the NCCL tests with real
# ranks, the single-GPU suites touched, and a short real-rank bench.
#   OUT=dir dev/multi_gpu.sh W [bench args...]
#   SPLIT_TESTS=1: the single-GPU test_split too; SPLIT_TIMEOUT=1: the split backend's forced timeout,
#   with and without NCCL's symmetric windows (~3 min)
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
W=${1:-2}; shift || true
out=${OUT:-/tmp/moe_ep_multi}; mkdir -p "$out"
t0=$(date +%s)
cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DMOE_EP_WITH_CUDA=ON >"$out/configure.log" 2>&1 \
  && cmake --build build-device -j32 >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 120 build-device/tests/test_nccl >"$out/nccl1.log" 2>&1; echo "test_nccl (world 1) rc=$? $(tail -1 "$out/nccl1.log")"
MOE_EP_LAUNCH_TIMEOUT=${NCCL_TEST_TIMEOUT:-150} bash scripts/nccl_launch.sh "$W" build-device/tests/test_nccl --worker >"$out/nccl$W.log" 2>&1
echo "test_nccl ranks $W rc=$?"; grep -E "passed, .* failed|exit" "$out/nccl$W.log"
if [ -n "${SPLIT_TIMEOUT:-}" ]; then # the split backend's forced timeout (design.md, "Known failure"):
  # as built, then without NCCL's symmetric windows (NCCL_WIN_ENABLE=0: NCCL's classic kernels, which
  # poll the abort flag ncclCommAbort sets first; the symmetric kernels may not)
  for win in 1 0; do
    NCCL_WIN_ENABLE=$win MOE_EP_TEST_SPLIT_TIMEOUT=1 MOE_EP_LAUNCH_TIMEOUT=90 bash scripts/nccl_launch.sh "$W" \
      build-device/tests/test_nccl --worker >"$out/split_timeout_win$win.log" 2>&1
    echo "split timeout (NCCL_WIN_ENABLE=$win) rc=$?"; grep -E "split: |passed, .* failed" "$out/split_timeout_win$win.log" | tail -8
  done
fi
if [ -n "${SPLIT_TESTS:-}" ]; then
  timeout 120 build-device/tests/test_split >"$out/split.log" 2>&1; echo "test_split rc=$? $(tail -1 "$out/split.log")"
  MOE_EP_TEST_BACKENDS=split,mega timeout 120 build-device/tests/test_split >"$out/split_mega.log" 2>&1; echo "test_split_mega rc=$? $(tail -1 "$out/split_mega.log")"
fi
if [ $# -gt 0 ]; then
  MOE_EP_LAUNCH_TIMEOUT=${BENCH_TIMEOUT:-240} bash scripts/nccl_launch.sh "$W" build-device/tools/moe_ep bench --nccl --out "$out/bench_nccl$W.md" "$@" >"$out/bench$W.log" 2>&1
  echo "bench rc=$?"; cat "$out/bench_nccl$W.md" 2>/dev/null | tail -40
fi
echo "total $(( $(date +%s) - t0 )) s"
