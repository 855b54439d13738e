#!/usr/bin/env bash
# seventy-second session's first call (~6 min): issue #4's emulated EP8 groups at main (the seventy-first
# session ran only the slice after its merges) and the GPU suite, both from a carry dir built on the CI
# machine (Release, ptxas guard on):
#   cmake --build build -j2 --target moe_ep_tool test_split test_tiles test_device_codec test_fuzz_gpu \
#     test_tile_wait test_nccl; mkdir -p build-xN; xz -c build/tools/moe_ep > build-xN/moe_ep_B.xz;
#   for t in test_split test_tiles test_device_codec test_fuzz_gpu test_tile_wait test_nccl; do
#     xz -c build/tests/$t > build-xN/$t.xz; done
#   D=build-xN bash dev/next_call.sh            D=build-xN PART=pro bash dev/next_call.sh   (carry build-xN)
cd "$(dirname "$0")/.."
D=${D:?carry dir}
if [ "${PART:-}" = pro ]; then ISSUE4_LIMITS="0 330 0" dev/issue4_run.sh $D/moe_ep_B
else bash dev/gpu_suite_carried.sh $D | tail -3; ISSUE4_LIMITS="125 0 120" dev/issue4_run.sh $D/moe_ep_B; fi
