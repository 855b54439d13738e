#!/usr/bin/env bash
# device (one call, ~9 min; carry build-d54, built by dev/build_carry.sh on the CI machine):
#   t   test_split of O (main + mega rows in token order, dev/drafts/mega_token_order.patch) and of C
#       (the fifty-third session's drafts B + C), split and mega
#   ab  paired A/B (one round): A = main, B, C (mxfp8, w4a8 split + mega, flash 512 / 8192), then
#       A against O (mega, the register tile's four paths, flash and pro at 2048 and 8192)
#   dev/d54.sh [t] [ab]   (both by default; the summary last)
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
D=build-d54; O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
modes=${*:-t ab}
for b in moe_ep_A moe_ep_B moe_ep_C moe_ep_O test_split_C test_split_O; do carried $D/$b || exit 1; done
sum=$O/summary.txt; : > $sum
for m in $modes; do case $m in
t)
  for v in O C; do
    MOE_EP_TEST_BACKENDS=split,mega timeout ${TS_TIMEOUT:-200} $D/test_split_$v > $O/ts_$v.log 2>&1; rc=$?
    echo "test_split $v (split, mega) rc=$rc $(tail -1 $O/ts_$v.log)" | tee -a $sum
    [ $rc -eq 0 ] || grep -h -B2 -A4 -m5 FAIL $O/ts_$v.log | head -30 | tee -a $sum
  done
  grep -A14 "rows in token order" $O/ts_O.log | head -16 ;;
ab)
  timeout 170 scripts/ab.sh 1 $D/moe_ep_A $D/moe_ep_B $D/moe_ep_C -- --paths mxfp8,w4a8 --backends split,mega \
    --geometry ds-v4-flash --tokens 512,8192 --iters 10 > $O/ab_bc.log 2>&1
  echo "== A B C" >> $sum; tail -14 $O/ab_bc.log >> $sum
  mkdir -p $O/o; OUT=$O/o timeout 200 scripts/ab.sh 1 $D/moe_ep_A $D/moe_ep_O -- --paths mxfp8,w4a8,nvfp4,fp8_block \
    --backends mega --geometry ds-v4-flash,ds-v4-pro --tokens 2048,8192 --iters 10 > $O/ab_o.log 2>&1
  echo "== A O" >> $sum; tail -20 $O/ab_o.log >> $sum ;;
esac; done
echo "===== summary"; cat $sum
