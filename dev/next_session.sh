#!/usr/bin/env bash
# device, one call (~150 s; run with carry build-carry): the two experiments the thirty-second
# session left ready (design.md "Next" 2 and 5), each printing its own table.
#   1. the kernel lab's gathered A forms against the tile list, in a burst and sustained;
#   2. bf16 swapped from 48 rows an expert (moe_ep_w48) against the rule at 128 (moe_ep_su),
#      T = 512 and 2048, both geometries, 2 paired rounds (the bench sustains each cell 200 ms).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
t0=$(date +%s)
timeout 120 build-carry/mc_lab gather > $OUT/lab_gather.txt 2>&1; echo "lab gather rc=$? $(( $(date +%s) - t0 )) s"
timeout 120 build-carry/mc_lab gather 200 > $OUT/lab_gather_sustained.txt 2>&1; echo "lab gather sustained rc=$? $(( $(date +%s) - t0 )) s"
for f in lab_gather lab_gather_sustained; do echo "== $f"; grep -E "^[a-z].*:|time |WRONG|OK" $OUT/$f.txt | cut -c1-110; done
timeout 400 scripts/ab.sh 2 build-carry/moe_ep_su build-carry/moe_ep_w48 -- --paths bf16 --backends split,mega \
  --tokens 512,2048 --iters 20 --warmup 3 > $OUT/ab_w48.txt 2>&1; echo "ab rc=$? $(( $(date +%s) - t0 )) s"
tail -n 30 $OUT/ab_w48.txt
