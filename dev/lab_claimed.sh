#!/usr/bin/env bash
# device (~30 s; carry build-carry): the static and the claimed tile list in turns
# (`build-carry/mc_lab claimed 200 [ORDER]`, ORDER of s and c, default scsccs), with nvidia-smi sampling the SM clock and the
# power every 20 ms beside it, so that a slow form's clock can be read off.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
out=${OUT:-/tmp/moe_ep_out}; mkdir -p "$out"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader -lms 20 > "$out/smi.csv" 2>&1 &
smi=$!
sleep 1
timeout 200 build-carry/mc_lab claimed 200 ${1:-scsccs} > "$out/lab_claimed.txt" 2>&1; echo "lab rc=$?"
sleep 0.5; kill $smi
grep -E "^[a-z].*:|time |recorded|WRONG" "$out/lab_claimed.txt" | cut -c1-140
# each form's window: from the previous form's end to its own (its warm-up and its timed launches)
python3 - "$out/lab_claimed.txt" "$out/smi.csv" <<'PY'
import re, sys
ends = []
for line in open(sys.argv[1]):
    m = re.search(r"time (.+?)\s+([\d.]+) us .*/ tile list ([\d.]+)\s+\(ended (\d+):([\d.]+)\)", line)
    if m: ends.append((m.group(1), float(m.group(3)), int(m.group(4)) * 60 + float(m.group(5))))
smi = []
for line in open(sys.argv[2]):
    f = [x.strip() for x in line.split(",")]
    if len(f) < 6: continue
    try:
        hh, mm, ss = f[0].split(" ")[1].split(":")
        smi.append((int(mm) * 60 + float(ss), float(f[1].split()[0]), float(f[3].split()[0]), f[5]))
    except Exception: pass
prev = None
for name, ratio, end in ends:
    start = prev if prev is not None else end - 0.3
    w = [s for s in smi if start + 0.1 <= s[0] <= end]   # skip the setup right after the previous form
    if w:
        clk = sorted(x[1] for x in w); pw = sorted(x[2] for x in w)
        print("%-22s %.3f  SM MHz median %4.0f min %4.0f  power median %3.0f W  (%d samples)" % (name, ratio, clk[len(clk)//2], clk[0], pw[len(pw)//2], len(w)))
    prev = end
PY
