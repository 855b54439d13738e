#!/usr/bin/env bash
# Fifty-fifth session's device calls (B = 87b11f6 + the MXFP8 activation ring, merged as 285bdfc; C = B +
# dev/drafts/rs_tile_act_ring_w4a8.patch; binaries built on the CI machine by dev/build_carry.sh build-d55).
#   dev/d55.sh ab     (carry build-d55/moe_ep_{A,C,D}.gz; ~9 min): paired bench, MXFP8 / W4A8 / FP8-BLOCK
#     (D = C + rs_tile_act_ring_fp8_block.patch)
#   dev/d55.sh t      (carry build-d55/test_*_C.gz): test_tiles and test_split (split, mega) of C
#   dev/d55.sh all    (carry build-d55c, build-d55/moe_ep_{A,C}.gz; ~9 min): C's GPU suite, then A / C
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
case "${1:-}" in
ab) # AB_BINS: the tools compared, the first the base (default A C D)
  bins=""; for b in ${AB_BINS:-A C D}; do carried build-d55/moe_ep_$b || exit 1; bins="$bins build-d55/moe_ep_$b"; done
  timeout ${AB_LIMIT:-570} scripts/ab.sh ${AB_ROUNDS:-2} $bins -- \
    --paths ${AB_PATHS:-mxfp8,w4a8,fp8_block} --backends split,mega --geometry ds-v4-flash,ds-v4-pro --tokens ${AB_TOKENS:-512,8192} \
    --iters 10 ${AB_EXTRA:-} 2>&1 | tail -60 ;;
t)
  for b in test_tiles_C test_split_C; do carried build-d55/$b || exit 1; done
  timeout 200 build-d55/test_tiles_C > $O/tiles_C.log 2>&1; echo "test_tiles C rc=$? $(tail -1 $O/tiles_C.log)"
  MOE_EP_TEST_BACKENDS=split,mega timeout 380 build-d55/test_split_C > $O/split_C.log 2>&1
  echo "test_split C (split, mega) rc=$? $(tail -1 $O/split_C.log)"
  grep -m5 -A3 FAIL $O/tiles_C.log $O/split_C.log ;;
all) # carry build-d55c (GPU tests of C) and build-d55/moe_ep_{A,C}.gz: C's suite, then A / C
  timeout 330 dev/gpu_suite_carried.sh build-d55c 2>&1 | tail -12
  for b in A C; do carried build-d55/moe_ep_$b || exit 1; done
  left=$(( 575 - ($(date +%s) - t0) ))
  timeout $left scripts/ab.sh ${AB_ROUNDS:-2} build-d55/moe_ep_A build-d55/moe_ep_C -- \
    --paths ${AB_PATHS:-mxfp8,w4a8} --backends split,mega --geometry ds-v4-flash,ds-v4-pro --tokens ${AB_TOKENS:-512,8192} \
    --iters 10 ${AB_EXTRA:-} 2>&1 | tail -40 ;;
*) sed -n 2,6p "$0"; exit 2 ;;
esac
echo "d55 $1 $(( $(date +%s) - t0 )) s"
