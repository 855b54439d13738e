#!/usr/bin/env bash
# seventy-fifth session's first call (~4 min): is the decode dispatch item's 5-7.5 us for one token cold
# code / parameters after the bench's L2 flush? (1) main's tool with `--flush none` against the default
# read flush, mega fwd at T = 8 / 64, two rounds; (2) a lab trace build's step marks inside the dispatch
# item (dev/drafts/lab_dispatch_steps.patch) with either flush. Binaries built on the CI machine:
#   X/moe_ep_A.gz: main's tool (cmake -DCMAKE_BUILD_TYPE=Release, moe_ep_tool)
#   X/moe_ep_L.gz: a worktree of main with dev/drafts/lab_dispatch_steps.patch applied, cmake
#     -DCMAKE_BUILD_TYPE=Release -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF, its moe_ep_tool
#   X=X bash dev/next_call.sh     (carry X; $OUT: flush_*.md, traces.tgz, steps.txt)
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
X=${X:?carry dir}
. scripts/carried.sh
carried $X/moe_ep_A && carried $X/moe_ep_L || exit 1
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
t0=$(date +%s)
for r in 1 2; do
  for f in read none; do
    timeout 100 $X/moe_ep_A bench --paths ${PATHS:-fp8_block,mxfp8,nvfp4} --backends mega --geometry ds-v4-flash \
      --tokens 8,64 --iters 20 --warmup 3 --sustain-ms 500 --flush $f --out $OUT/flush_r${r}_$f.md > $OUT/log_flush_r${r}_$f.txt 2>&1
    echo "round $r flush $f rc=$? $(( $(date +%s)-t0 )) s"
  done
done
python3 scripts/bench_compare.py $OUT/flush_r*_read.md -- $OUT/flush_r*_none.md 2>&1 | tail -16
for f in read none; do
  for c in fp8_block:ds-v4-flash:8 mxfp8:ds-v4-flash:8 nvfp4:ds-v4-pro:8; do
    IFS=: read -r path geo T <<< "$c"
    MOE_EP_MEGA_TRACE_DUMP=$OUT/dump_${f}_${path}_${geo}_$T.txt timeout 60 $X/moe_ep_L bench --paths $path --backends mega \
      --geometry $geo --tokens $T --iters 5 --warmup 1 --sustain-ms 200 --flush $f > $OUT/log_${f}_${path}_$T.txt 2>&1
    echo "trace $f $c rc=$? $(grep -h 'mega timeline' $OUT/log_${f}_${path}_$T.txt | head -1)"
  done
done
for f in read none; do echo "== flush $f"; python3 dev/dispatch_steps.py $OUT/dump_${f}_*.txt; done > $OUT/steps.txt 2>&1
tar -C $OUT -czf $OUT/traces.tgz $(cd $OUT && ls dump_* log_* 2>/dev/null) && rm -f $OUT/dump_* $OUT/log_*
grep -A3 "^fp8_block\|count items" $OUT/steps.txt | head -30
echo "all $(( $(date +%s)-t0 )) s"; ls $OUT
