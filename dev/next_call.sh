#!/usr/bin/env bash
# sixty-ninth session's call, not run (no machine came; carry build-x76, ~44 MB, ~9 min; build-x76/run.sh is this file): B = main +
# dev/drafts/mega_rs144_rows.patch (the 144-row tiles' rows 128 a tile, the excess over 128 m_e 16 more in
# the first tiles) built at 64346a5: its test_split with split and mega (2bbd787's 144-row cases on every wire
# and the patch's case at 384 rows an expert), paired A / B at T = 2048 (A = main at 6a5c7dd's src), the
# lab's A16 stage waits with loads skipped and with the fp16 stages multicast over 2-block clusters
# (rs_tile_mc0 / mc1: -DFR_LAB_ACT16 -DLAB_MC_CASES, mc1 with -DFR_LAB_MCAST=1), then the emulated pro group's
# FP8-BLOCK rows. Trim by env:
# TS_LIMIT, AB_LIMIT, AB_ROUNDS, AB_TOKENS, LAB_BEFORE, FP8B_BEFORE (seconds into the run).
cd "$(dirname "$0")/.."
. scripts/carried.sh
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
carried build-x76/test_split || exit 1
timeout ${TS_LIMIT:-200} env MOE_EP_TEST_BACKENDS=split,mega build-x76/test_split > $OUT/test_split_mega.log 2>&1
echo "test_split B (split, mega) rc=$? $(tail -1 $OUT/test_split_mega.log) $(el) s"
grep FAIL $OUT/test_split_mega.log | cut -c1-200 | head -20
xz -9 $OUT/test_split_mega.log
for b in moe_ep_A moe_ep_B; do carried build-x76/$b || exit 1; done
timeout ${AB_LIMIT:-170} scripts/ab.sh ${AB_ROUNDS:-2} build-x76/moe_ep_A build-x76/moe_ep_B -- --paths nvfp4,mxfp8,w4a8 --backends mega \
  --geometry ds-v4-flash,ds-v4-pro --tokens ${AB_TOKENS:-2048} --iters 10 2>&1 | tail -16
echo "ab $(el) s"
(cd $OUT && tar czf ab.tgz r*_A.md r*_B.md && rm -f r*_A.md r*_B.md)
for v in base skip1 skip2 skip3 w2; do
  [ $(el) -lt ${LAB_BEFORE:-400} ] || break
  b=build-x76/rs_tile_$v; [ $v = w2 ] && b=build-x76/rs_tile_base
  if [ $v = w2 ]; then LAB_WEIGHT_EXPERTS=2 timeout 40 $b; else timeout 40 $b; fi > $OUT/lab_$v.txt 2>&1
  echo "== lab $v rc=$? $(el) s"; grep -A3 "t8192" $OUT/lab_$v.txt | grep -v "producer per tile" | cut -c1-190
done
# the A16 tiles with their fp16 stages multicast over 2-block clusters (lab-only FR_LAB_MCAST) against without
for v in mc0 mc1; do
  [ $(el) -lt ${LAB_BEFORE:-400} ] || break
  timeout 60 build-x76/rs_tile_$v > $OUT/lab_$v.txt 2>&1; echo "== lab $v rc=$? $(el) s"
  grep -A3 "^t[0-9]" $OUT/lab_$v.txt | grep -v "producer per tile" | cut -c1-190
done
(cd $OUT && tar czf lab.tgz lab_*.txt && rm -f lab_*.txt)
if [ $(el) -lt ${FP8B_BEFORE:-430} ]; then
  timeout $(( 580 - $(el) )) build-x76/moe_ep_A bench --ranks 8 --geometry ds-v4-pro --paths fp8_block --backends split,mega \
    --tokens 8,64,512,2048,8192 --iters 20 --warmup 3 --out $OUT/r8_pro_fp8b.md > $OUT/r8_pro_fp8b.log 2>&1
  echo "r8 pro fp8_block rc=$? $(el) s"; grep "mega\|split" $OUT/r8_pro_fp8b.log | tail -10
fi
echo "done $(el) s"
