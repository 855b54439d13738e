#!/usr/bin/env bash
# ptxas's registers and spills of one mega_forward instance (~6 s instead of
# the whole mega.cu's ~2 min), on any machine with nvcc (the CI machine too):
#   scripts/ptxas_mega.sh BM MODE SB [nvcc args...]
# MODE by name (src/kernels/mega_common.cuh, gemm_tile.cuh): BF16 CVT FP8 WGMMA FP8_RS MX_RS W4_RS NV_RS QG_RS;
# SB 0, 32 or 128, as launch_for_format instantiates them (-DMOE_EP_MEGA_ONE_A16=true: the A16
# form of a 128-row MX_RS or W4_RS instance), e.g.
#   scripts/ptxas_mega.sh 128 W4_RS 32      scripts/ptxas_mega.sh 128 WGMMA 0
# Extra nvcc args (-DSOME_LAB_SWITCH) pass through. Prints ptxas's lines for
# mega_forward; the build itself still checks every instance (--warn-on-spills).
# A guide only: ptxas's C7511 (serialised wgmma, which the build refuses) in
# a 128-row instance came and went with item-code changes in the full
# mega.cu where this one-instance build showed none (docs/benchmarks.md,
# twenty-seventh session; in the twenty-eighth it agreed both ways); only
# the full build decides (`full`, below).
# PTXAS_MEGA_CUBIN=FILE keeps the cubin (e.g. for dev/sass_wgmma_loops.py).
#   scripts/ptxas_mega.sh full [nvcc args...]
# compiles the whole mega.cu as the build does (~3 min on the 2-core CI
# machine) and prints a line per mega_forward instance: registers, stack,
# spills, and C75xx (serialised wgmma) where ptxas reported it: what the
# build's guard decides, per instance.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = full ]; then
  shift
  out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
  nvcc -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas=-v -Iinclude -Isrc \
    -DMOE_EP_HAVE_CUDA=1 "$@" -c -o "$out/mega.o" src/kernels/mega.cu >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
  python3 - "$out/log" src/kernels/mega_common.cuh src/kernels/sm90/gemm_tile.cuh <<'PY'
import re, sys
src = open(sys.argv[2]).read() + open(sys.argv[3]).read()  # mega_common.cuh's modes, gemm_tile.cuh's enum
modes = {m.group(2): m.group(1) for m in re.finditer(r"MODE_(\w+)(?: =)? (\d+)\b", src)}
inst, order = {}, []
def key(fn):
    m = re.match(r"_Z12mega_forwardILi(\d+)ELi(\d+)ELi(\d+)ELb(\d)E", fn)
    return m and "mega_forward<%s, %s, %s%s>" % (m.group(1), modes.get(m.group(2), m.group(2)), m.group(3),
                                                 ", A16" if m.group(4) == "1" else "")
cur = None
for line in open(sys.argv[1]):
    m = re.search(r"Compiling entry function '(\S+)'", line)
    if m:
        cur = key(m.group(1))
        if cur and cur not in inst: inst[cur] = {}; order.append(cur)
        continue
    m = re.search(r"\((C75\d\d)\).*function '(\S+)'", line)
    if m and key(m.group(2)):
        k = key(m.group(2)); inst.setdefault(k, {})["c75"] = m.group(1)
        if k not in order: order.append(k)
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and cur: inst[cur]["spill"] = "stack %s, spills %s / %s" % m.groups()
    m = re.search(r"Used (\d+) registers", line)
    if m and cur: inst[cur]["regs"] = m.group(1)
for k in order:
    v = inst[k]
    print("%-34s %4s registers, %-24s %s" % (k, v.get("regs", "?"), v.get("spill", ""), v.get("c75", "")))
PY
  exit 0
fi
[ $# -ge 3 ] || { sed -n '2,20p' "$0"; exit 2; }
bm=$1 mode=MODE_$2 sb=$3; shift 3
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
nvcc -O3 -DNDEBUG -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas=-v -Iinclude -Isrc \
  -DMOE_EP_HAVE_CUDA=1 -DMOE_EP_MEGA_ONE_INSTANCE -DMOE_EP_MEGA_ONE_BM="$bm" -DMOE_EP_MEGA_ONE_MODE="$mode" \
  -DMOE_EP_MEGA_ONE_SB="$sb" "$@" -cubin -o "$out/mega.cubin" src/kernels/mega.cu 2>&1 |
  grep -E -A3 "Compiling entry function '_Z12mega_forward|C75" | grep -E "Compiling|spill|Used|C75"
if [ -n "${PTXAS_MEGA_CUBIN:-}" ]; then cp "$out/mega.cubin" "$PTXAS_MEGA_CUBIN"; fi
