#!/usr/bin/env bash
# device (~2-4 min): a draft's quick check and its paired A / B in one call. From DIR (gzipped,
# carried): test_tiles and test_split (default backends, then split and mega), then, if they
# passed, scripts/ab.sh 2 of two carried moe_ep binaries. LAB=BIN: a kernel lab binary run between
# (dev/lab_variants.sh's line filter).
#   [LAB=DIR/rs_tile_X] dev/tests_ab.sh DIR BIN_A BIN_B [-- moe_ep bench args]   (carry DIR)
# Fifty-eighth session (its one-off d58b-d58f scripts): e.g. dev/tests_ab.sh build-n58
# build-n58/moe_ep_A build-n58/moe_ep_N -- --paths nvfp4 --backends split,mega --geometry
# ds-v4-flash,ds-v4-pro --tokens 512,2048,8192 --iters 10.
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
[ $# -ge 3 ] || { sed -n '2,9p' "$0"; exit 2; }
D=$1 A=$2 B=$3; shift 3
[ "${1:-}" = -- ] && shift
O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
for b in $D/test_tiles $D/test_split $A $B; do carried $b || exit 1; done
fail=0
run() { # NAME [ENV=VALUE ...] BINARY
  local name=$1; shift
  timeout 250 env "$@" > $O/$name.log 2>&1; local rc=$?
  echo "$name rc=$rc $(tail -1 $O/$name.log)"
  [ $rc = 0 ] || { fail=1; grep -m8 -B2 -A3 FAIL $O/$name.log; }
}
run test_tiles $D/test_tiles
run test_split $D/test_split
run test_split_mega MOE_EP_TEST_BACKENDS=split,mega $D/test_split
echo "tests $(( $(date +%s) - t0 )) s"
[ $fail = 0 ] || exit 1
[ -z "${LAB:-}" ] || dev/lab_variants.sh "$LAB"
scripts/ab.sh 2 $A $B -- "$@" 2>&1 | tail -30
echo "tests_ab $(( $(date +%s) - t0 )) s"
