#!/usr/bin/env bash
# seventy-fifth session's first call (~5 min): is the decode dispatch item's 5-7.5 us for one token cold
# code / parameters after the bench's L2 flush? And the two-pass dispatch draft (B). (1) paired mega fwd at
# T = 8: A = main's tool, N = the same with `--flush none`, B = the two-pass dispatch draft (merged as 69a4dae, its patch removed)
# (a decode dispatch item encodes its rows before the plan's wait for the count items); (2) a lab trace
# build's step marks inside the dispatch item (dev/drafts/lab_dispatch_steps.patch) with either flush;
# (3) B's test_split with split and mega. Binaries built on the CI machine, gzipped:
#   X/moe_ep_A: main's tool (cmake -DCMAKE_BUILD_TYPE=Release, moe_ep_tool)
#   X/moe_ep_B, X/test_split: the same of a worktree with the draft applied (ptxas guard on; main since 69a4dae)
#   X/moe_ep_L: a worktree of main with dev/drafts/lab_dispatch_steps.patch applied, cmake
#     -DCMAKE_BUILD_TYPE=Release -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF, its moe_ep_tool
#   X=X bash dev/next_call.sh     (carry X; $OUT: r*_[ABC].md, traces.tgz, steps.txt, test logs)
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
X=${X:?carry dir}
. scripts/carried.sh
carried $X/moe_ep_A && carried $X/moe_ep_L || exit 1
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
t0=$(date +%s)
printf '#!/bin/sh\nexec %s/moe_ep_A "$@" --flush none\n' "$PWD/$X" > $X/moe_ep_N && chmod +x $X/moe_ep_N
B=; [ -f $X/moe_ep_B.gz ] && B=$X/moe_ep_B
[ -n "${TRACES_ONLY:-}" ] || OUT=$OUT timeout 240 bash scripts/ab.sh 2 $X/moe_ep_A $X/moe_ep_N $B -- --paths ${PATHS:-fp8_block,mxfp8,nvfp4} \
  --backends mega --geometry ds-v4-flash --tokens ${TOKENS:-8} --iters 20 --warmup 3 --sustain-ms 500 2>&1 | tail -14
echo "ab $(( $(date +%s)-t0 )) s"
for f in read none; do
  for c in fp8_block:ds-v4-flash:8 mxfp8:ds-v4-flash:8 nvfp4:ds-v4-pro:8; do
    IFS=: read -r path geo T <<< "$c"
    MOE_EP_MEGA_TRACE_DUMP=$OUT/dump_${f}_${path}_${geo}_$T.txt timeout 60 $X/moe_ep_L bench --paths $path --backends mega \
      --geometry $geo --tokens $T --iters 5 --warmup 1 --sustain-ms 200 --flush $f > $OUT/log_${f}_${path}_$T.txt 2>&1
    echo "trace $f $c rc=$? $(grep -h 'mega timeline' $OUT/log_${f}_${path}_$T.txt | head -1)"
  done
done
for f in read none; do echo "== flush $f"; python3 dev/dispatch_steps.py $OUT/dump_${f}_*.txt; done > $OUT/steps.txt 2>&1
for f in $OUT/dump_*; do sed "s|^|$(basename $f .txt) |" $f; done | gzip > $OUT/dumps.txt.gz; rm -f $OUT/dump_* $OUT/log_*
grep -B1 -A4 "count items" $OUT/steps.txt | head -40
echo "traces $(( $(date +%s)-t0 )) s"
if [ -n "${PAIR:-}" ] && [ -n "$B" ]; then # the draft against main only, more rounds
  OUT=$OUT/pair timeout 200 bash scripts/ab.sh ${PAIR} $X/moe_ep_A $B -- --paths fp8_block,mxfp8 --backends mega \
    --geometry ds-v4-flash --tokens 8,64 --iters 20 --warmup 3 --sustain-ms 500 2>&1 | tail -8
  echo "pair $(( $(date +%s)-t0 )) s"
fi
if [ -z "${TRACES_ONLY:-}" ] && [ -f $X/test_split.gz ]; then
  carried $X/test_split && timeout 200 env MOE_EP_TEST_BACKENDS=split,mega $X/test_split > $OUT/test_split_mega.log 2>&1
  echo "B test_split (split, mega) rc=$? $(tail -1 $OUT/test_split_mega.log)"; grep -m5 -A3 FAIL $OUT/test_split_mega.log
fi
echo "all $(( $(date +%s)-t0 )) s"; ls $OUT
