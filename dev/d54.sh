#!/usr/bin/env bash
# device (carry build-d54, built by dev/build_carry.sh on the CI machine; two calls: `t abo`, `tc abbc`):
#   t    test_split of O (main + mega rows in token order, dev/drafts/mega_token_order.patch), split
#        and mega (~2-3 min)
#   tc   the same of C (the fifty-third session's drafts B + C; ~1 min)
#   abo  paired A/B (one round) of A = main against O: mega, mxfp8 / w4a8 / nvfp4, flash and pro,
#        T = 512 (not ordered: any cost of the code itself) and 8192 (ordered) (~3 min)
#   abbc A = main, B, C: mxfp8, w4a8 split + mega, flash 512 / 8192 (~2.5 min)
#   tro  O's item trace, mxfp8 flash 8192 (TRACE_CELLS; ~30 s): do the combine items run beside GEMM2?
# Carry only what the modes need (files of build-d54: moe_ep_A.gz moe_ep_O.gz test_split_O.gz
# moe_ep_TO.gz for `t abo tro`; the 64 MiB limit does not take all seven).
#   dev/d54.sh [modes...]   (default: t abo; the summary last)
set -uo pipefail
. "$(dirname "$0")/../scripts/carried.sh"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
D=build-d54; O=${OUT:-/tmp/moe_ep_out}; mkdir -p $O
modes=${*:-t abo}
need() { local b; for b in "$@"; do carried $D/$b || { echo "missing $D/$b(.gz)"; exit 1; }; done; }
sum=$O/summary.txt; : > $sum
for m in $modes; do case $m in
t|tc)
  v=O; [ $m = tc ] && v=C
  need test_split_$v
  MOE_EP_TEST_BACKENDS=split,mega timeout ${TS_TIMEOUT:-200} $D/test_split_$v > $O/ts_$v.log 2>&1; rc=$?
  echo "test_split $v (split, mega) rc=$rc $(tail -1 $O/ts_$v.log)" | tee -a $sum
  [ $rc -eq 0 ] || grep -h -B2 -A4 -m5 FAIL $O/ts_$v.log | head -30 | tee -a $sum
  [ $v = O ] && grep -A14 "rows in token order" $O/ts_O.log | head -16 ;;
abo)
  need moe_ep_A moe_ep_O
  mkdir -p $O/o; OUT=$O/o timeout 220 scripts/ab.sh 1 $D/moe_ep_A $D/moe_ep_O -- --paths mxfp8,w4a8,nvfp4 \
    --backends mega --geometry ds-v4-flash,ds-v4-pro --tokens 512,8192 --iters 10 > $O/ab_o.log 2>&1
  echo "== A O" >> $sum; tail -16 $O/ab_o.log >> $sum ;;
abbc)
  need moe_ep_A moe_ep_B moe_ep_C
  timeout 170 scripts/ab.sh 1 $D/moe_ep_A $D/moe_ep_B $D/moe_ep_C -- --paths mxfp8,w4a8 --backends split,mega \
    --geometry ds-v4-flash --tokens 512,8192 --iters 10 > $O/ab_bc.log 2>&1
  echo "== A B C" >> $sum; tail -14 $O/ab_bc.log >> $sum ;;
tro) # O's item trace (moe_ep_TO: a -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF build of O's tool)
  need moe_ep_TO
  TRACE_BIN=$D/moe_ep_TO timeout 150 dev/trace_items.sh ${TRACE_CELLS:-mxfp8:ds-v4-flash:8192} > $O/trace_o.log 2>&1
  echo "== O's item trace" >> $sum; tail -40 $O/trace_o.log >> $sum ;;
esac; done
echo "===== summary"; cat $sum
