#!/usr/bin/env bash
# Kernel lab: the register tile's rows against the heuristic's bounds
# (moe_ep_single_tile_rows: 16 up to 8 rows per expert on average, 32 up to
# 28, 64 up to 60, else 128, set from this script's runs of 2026-12-01), one
# call on the GPU machine. For each forced
# --tile-rows R (and the heuristic's own choice) it benches the EP8 slice at T
# that put 8 .. 72 rows per expert on an expert (flash: 32 experts, pro: 48;
# rows per expert = T * 6 / experts), then prints per cell the fastest R and
# each R's time against the heuristic's.
#   dev/tile_rows_sweep.sh [moe_ep binary] [extra bench args...]
# e.g. dev/tile_rows_sweep.sh build-carry/moe_ep --backends mega --paths w4a8,mxfp8
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
bin=${1:-build-device/tools/moe_ep}; shift || true
out=${OUT:-/tmp/moe_ep_out}/tile_rows; mkdir -p "$out"
common=(--paths mxfp8,w4a8,nvfp4,fp8_block --backends mega --iters 20 --warmup 3)
# flash: T 64 / 128 / 192 / 256 / 384 = 12 / 24 / 36 / 48 / 72 rows per expert; pro: 64 / 128 / 192 / 256 = 8 / 16 / 24 / 32
# TILE_SWEEP_GEOS (environment) picks the geometries, e.g. "ds-v4-pro" (two GPUs: one each);
# TILE_SWEEP_T_FLASH / TILE_SWEEP_T_PRO their token counts (comma-separated);
# TILE_SWEEP_ROWS the forced rows to run (default "heur 16 32 64 128"; heur: the heuristic's).
# Later bench args win over the common ones (e.g. --backends split,mega --ranks 8).
geos=()
for g in ${TILE_SWEEP_GEOS:-ds-v4-flash ds-v4-pro}; do
  case $g in
  ds-v4-flash) geos+=("$g ${TILE_SWEEP_T_FLASH:-64,128,192,256,384}");;
  ds-v4-pro) geos+=("$g ${TILE_SWEEP_T_PRO:-64,128,192,256}");;
  esac
done
for geo in "${geos[@]}"; do
  set -- $geo "$@"; g=$1 t=$2; shift 2
  for r in ${TILE_SWEEP_ROWS:-heur 16 32 64 128}; do
    opt=(); [ "$r" = heur ] || opt=(--tile-rows "$r")
    "$bin" bench --geometry "$g" --tokens "$t" "${common[@]}" "${opt[@]}" "$@" --out "$out/${g}_$r.md" >/dev/null 2>&1 ||
      echo "bench $g rows $r failed"
  done
done
python3 - "$out" <<'PY'
import glob, os, sys
sys.path.insert(0, 'scripts')
from bench_md import table_rows
times = {}  # (geometry, T, column) -> {rows: us}
for f in glob.glob(os.path.join(sys.argv[1], '*.md')):
    r = f.rsplit('_', 1)[1][:-3]
    for head, row in table_rows(f):
        for name, cell in zip(head[2:], row[2:]):
            if name.endswith('fwd') and cell.replace('.', '').isdigit():
                times.setdefault((row[0], int(row[1]), name), {})[r] = float(cell)
print('| geometry | T | column | heuristic (us) | 16 | 32 | 64 | 128 | fastest |')
print('|---|---:|---|---:|---:|---:|---:|---:|---|')
for (g, t, c), d in sorted(times.items()):
    h = d.get('heur')
    if not h: continue
    rel = [f"{d[k] / h:.3f}" if k in d else 'n/a' for k in ('16', '32', '64', '128')]
    best = min((v, k) for k, v in d.items() if k != 'heur')[1]
    print(f"| {g} | {t} | {c} | {h:.1f} | " + ' | '.join(rel) + f" | {best} |")
PY
