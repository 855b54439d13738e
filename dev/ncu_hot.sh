#!/usr/bin/env bash
# Kernel lab: where one GEMM kernel's warps wait, instruction by instruction
# (Nsight Compute's warp-state sampling), for one EP8-slice bench cell.
#   dev/ncu_hot.sh PATH T [geometry] [backend] [kernel regex] [top]   (after scripts/device.sh built build-device/)
# MOE_EP_BIN=FILE profiles another moe_ep binary (e.g. one built on the CI machine and carried).
# Prints the instructions with the most samples, with their stall reasons, then
# the executed instructions and samples summed by opcode (the kernel's instruction mix).
# By source line: dev/ncu_lines.py $OUT/ncu_hot_*.csv THE_BINARY (on any machine with the binary).
set -uo pipefail
cd "$(dirname "$0")/.."
p=${1:-fp8_block}; t=${2:-8192}; geo=${3:-ds-v4-flash}; be=${4:-split}; k=${5:-grouped_gemm|mega}; top=${6:-40}
out=${OUT:-/tmp}; rep="$out/ncu_hot_${p}_${t}_${be}"
export MOE_EP_KNOB_CACHE=off
ncu --kernel-name regex:"$k" --launch-count 1 --section WarpStateStats --section SourceCounters -f -o "$rep" \
    "${MOE_EP_BIN:-build-device/tools/moe_ep}" bench --paths "$p" --tokens "$t" --geometry "$geo" --backends "$be" \
    --iters 1 --warmup 0 >"$rep.log" 2>&1
echo "== ncu hot $p T=$t $geo $be (rc $?)"
ncu --import "$rep.ncu-rep" --page source --csv --print-source sass >"$rep.csv" 2>"$rep.err" || cat "$rep.err"
python3 - "$rep.csv" "$top" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr_i = next((i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r)), None)
if hdr_i is None:
    print("no sampling columns; first lines:"); [print(r[:8]) for r in rows[:5]]; sys.exit(0)
h = rows[hdr_i]; body = [r for r in rows[hdr_i + 1:] if len(r) == len(h)]
col = lambda name: next(i for i, c in enumerate(h) if name in c)
ia, isrc, iall = col("Address"), col("Source"), col("Warp Stall Sampling (All")
num = lambda v: float(v.replace(",", "") or 0) if v.replace(",", "").replace(".", "").isdigit() else 0.0
total = sum(num(r[iall]) for r in body) or 1
stall = [i for i, c in enumerate(h) if c.startswith("stall_") or "Stall" in c and i != iall and "Not" not in c]
print(f"{len(body)} instructions, {total:.0f} samples")
for r in sorted(body, key=lambda r: -num(r[iall]))[:int(sys.argv[2])]:
    why = sorted(((num(r[i]), h[i]) for i in stall), reverse=True)[:3]
    why = ", ".join(f"{n.replace('Warp Stall Sampling', '').strip()} {v:.0f}" for v, n in why if v > 0)
    print(f"{100 * num(r[iall]) / total:5.1f}%  {r[ia]:>8}  {r[isrc][:70]:70}  {why}")
iex = next((i for i, c in enumerate(h) if c.strip() == "Instructions Executed"), None)
if iex is not None:
    ops = {}
    for r in body:
        op = r[isrc].split()[0] if r[isrc].split() else "?"
        if op.startswith("@"): op = r[isrc].split()[1] if len(r[isrc].split()) > 1 else op
        op = op.split(".")[0]
        o = ops.setdefault(op, [0.0, 0.0]); o[0] += num(r[iex]); o[1] += num(r[iall])
    inst = sum(v[0] for v in ops.values()) or 1
    print(f"instruction mix: {inst:.0f} warp instructions executed")
    for op, (n, smp) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:25]:
        print(f"  {op:10} {100 * n / inst:5.1f}% of instructions  {100 * smp / total:5.1f}% of samples")
PY
