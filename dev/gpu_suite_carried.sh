#!/usr/bin/env bash
# device (~3 min): the GPU tests of a tree built on the CI machine, carried gzipped (when the
# device's time is too short to build there, as scripts/device.sh test does), each as ctest runs
# it (test_split twice: default backends, then split and mega).
#   dev/gpu_suite_carried.sh DIR     DIR: test_split.gz test_tiles.gz test_device_codec.gz
#                                    test_fuzz_gpu.gz test_tile_wait.gz test_nccl.gz
# Build them: cmake -S . -B B -DCMAKE_BUILD_TYPE=Release; cmake --build B -j2 --target test_split
# test_tiles test_device_codec test_fuzz_gpu test_tile_wait test_nccl; gzip -c B/tests/T > DIR/T.gz
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
D=${1:?usage: dev/gpu_suite_carried.sh DIR}; O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
pass=0 fail=0
run() { # NAME BINARY [ENV=VALUE ...]
  local name=$1 bin=$D/$2; shift 2
  carried $bin || { echo "$name: no $bin"; fail=$((fail + 1)); return; }
  timeout 300 env "$@" $bin > $O/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(tail -1 $O/$name.log)"
  if [ $rc -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); grep -m5 -A3 FAIL $O/$name.log; fi
}
run test_device_codec test_device_codec
run test_tile_wait test_tile_wait
run test_tiles test_tiles
run test_nccl test_nccl
run test_fuzz_gpu test_fuzz_gpu
run test_split test_split
run test_split_mega test_split MOE_EP_TEST_BACKENDS=split,mega
grep -h "large offsets" $O/test_split*.log | tail -n 2
# the logs as one file: the device returns at most 8 files from $OUT
(cd $O && tar czf suite_logs.tgz test_*.log && rm -f test_*.log)
echo "GPU tests (carried from $D): $pass passed, $fail failed"
