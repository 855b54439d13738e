#!/usr/bin/env bash
# device (~60 s): the SM clock and power while the bench runs bf16 pro T = 8192, beside Nsight
# Compute's single-forward kernel times (clocks uncontrolled): is the bench slower than a lone
# kernel because the GPU caps its power?
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
gunzip -kf build-carry/moe_ep_hy.gz; chmod +x build-carry/moe_ep_hy
nvidia-smi --query-gpu=power.limit,enforced.power.limit,power.max_limit,clocks.max.sm --format=csv
for b in split mega; do MOE_EP_BIN=build-carry/moe_ep_hy timeout 120 bash dev/ncu_forward.sh bf16 8192 ds-v4-pro $b | head -8; done
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant,clocks_event_reasons.active --format=csv,noheader -lms 10 > $OUT/smi.csv 2>/dev/null &
sp=$!; sleep 0.5
for i in 1 2; do
date +%s.%N >> $OUT/marks.txt
build-carry/moe_ep_hy bench --paths bf16 --backends split,mega --geometry ds-v4-pro --tokens 8192 --iters 20 --warmup 3 > $OUT/b$i.log 2>&1
date +%s.%N >> $OUT/marks.txt
grep -E "forward" $OUT/b$i.log | cut -c1-120
sleep 3
done
kill $sp
python3 - $OUT/smi.csv <<'PY'
import sys
rows=[l.strip().split(', ') for l in open(sys.argv[1]) if l.count(',')>=3]
print(len(rows), "samples", rows[0] if rows else "")
busy=[r for r in rows if 'W' in r[2] and float(r[2].split()[0])>250]
import statistics
cl=[int(r[1].split()[0]) for r in busy]
if cl: print("samples above 250 W:", len(cl), "clock median", statistics.median(cl), "min", min(cl), "max", max(cl), "mean %.0f"%statistics.mean(cl))
pw=[float(r[2].split()[0]) for r in busy]
if pw: print("power median %.0f max %.0f" % (statistics.median(pw), max(pw)))
from collections import Counter
print(Counter(r[3] for r in busy))
PY
