#!/usr/bin/env bash
# device (~40 s): the bf16 lab's forms timed sustained (build-carry/mc_lab sustained MS: the
# forms launched in turns for MS, then 10 rounds timed, medians), with nvidia-smi's SM clock.
set -uo pipefail
ms=${1:-300}
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant,clocks_event_reasons.active --format=csv,noheader -lms 50 > $OUT/smi_lab.csv 2>/dev/null &
smi=$!
build-carry/mc_lab sustained $ms > $OUT/lab_sustained.txt 2>&1; echo "lab rc=$?"
kill $smi
grep -E "^[a-z].*:|time |WRONG" $OUT/lab_sustained.txt | cut -c1-110
python3 - $OUT/smi_lab.csv <<'PY'
import sys, statistics
rows = [l.strip().split(', ') for l in open(sys.argv[1]) if l.count(',') >= 3]
busy = sorted(int(r[1].split()[0]) for r in rows if float(r[2].split()[0]) > 400)
if busy: print(f"nvidia-smi above 400 W: {len(busy)} samples, SM clock median {statistics.median(busy)} p10 {busy[len(busy)//10]} p90 {busy[9*len(busy)//10]} MHz")
PY
