#!/usr/bin/env bash
# device (~20 s a cell): the mega item trace of bf16 on the EP8 slice, by default at T = 2048 (pro,
# flash) and 8192 (pro): where mega's bf16 forward spends what split's stage does not.
#   dev/trace_bf16.sh [geometry:T ...]     e.g. dev/trace_bf16.sh ds-v4-flash:512
# Needs build-carry/moe_ep_T.gz (a -DMOE_EP_MEGA_TRACE=ON -DMOE_EP_PTXAS_GUARD=OFF build of the tool).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
gunzip -kf build-carry/moe_ep_T.gz; chmod +x build-carry/moe_ep_T
cells=${*:-ds-v4-pro:2048 ds-v4-flash:2048 ds-v4-pro:8192}
for g in $cells; do
  geo=${g%:*} T=${g#*:}
  MOE_EP_MEGA_TRACE_DUMP=$OUT/dump_${geo}_$T.txt build-carry/moe_ep_T bench --paths bf16 --backends split,mega --geometry $geo --tokens $T --iters 5 --warmup 1 > $OUT/log_${geo}_$T.txt 2>&1; echo "$geo $T rc=$?"
  grep -E "timeline|gemm1|gemm2|dispatch|combine|bf16" $OUT/log_${geo}_$T.txt | head -12
done
python3 - $OUT/dump_*.txt <<'PY'
import sys, collections
names = {0: "send", 1: "count", 2: "dispatch", 3: "gemm1", 4: "gemm2", 5: "rows", 6: "combine"}
for f in sys.argv[1:]:
    recs = [l.split() for l in open(f)]
    recs = [(int(b), int(k), int(t0), int(tw), int(t1)) for lab, b, k, t0, tw, st, t1 in recs]
    if not recs: continue
    z = min(r[2] for r in recs); end = max(r[4] for r in recs) - z
    blocks = len({r[0] for r in recs})
    print(f"{f.split('/')[-1]}: {len(recs)} records, {blocks} blocks, {end / 1e3:.1f} us first start to last end")
    by = collections.defaultdict(list)
    for r in recs: by[r[1]].append(r)
    for k, v in sorted(by.items()):
        busy = sum(r[4] - r[3] for r in v) / blocks / 1e3; wait = sum(r[3] - r[2] for r in v) / blocks / 1e3
        print(f"  {names.get(k, k):8s} {len(v):6d} items  from {(min(r[2] for r in v) - z) / 1e3:8.1f} to {(max(r[4] for r in v) - z) / 1e3:8.1f} us"
              f"  busy {busy:8.1f}  wait {wait:7.1f} us a block")
    last = sorted((max(r[4] for r in recs if r[0] == b and r[1] in (3, 4)) - z) / 1e3 for b in {r[0] for r in recs if r[1] in (3, 4)})
    q = lambda p: last[min(len(last) - 1, int(p * len(last)))]
    print(f"  each block's last GEMM end: min {last[0]:.1f} p10 {q(.1):.1f} p50 {q(.5):.1f} p90 {q(.9):.1f} max {last[-1]:.1f} us")
PY
