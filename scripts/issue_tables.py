#!/usr/bin/env python3
"""The tables issues #3 (split) and #4 (mega) ask for, from `moe_ep bench
--out` files of one run (one file per call; cells of later files win).

  scripts/issue_tables.py BENCH.md [BENCH2.md ...]

Prints two markdown tables:
  - split: expert stage / floor per path, geometry and T, which term bounds
    the floor (bytes or FLOPs), the ratio against the floor at the rate of
    the tensor instruction the tile really issues (the exact FP8 paths run
    fp16 HGMMA: the BF16 rate), the forward / floor, and for a cell over
    the 1.3x target what limits it (LIMITS below: findings recorded in
    docs/benchmarks.md);
  - mega: forward / floor against the 1.15x (T <= 512) and 1.25x targets,
    and mega / split forward (target < 1).
Geometry sizes: GEOMETRIES below (../shared/geometries.md)."""
import os
import re
import sys

from bench_md import table_rows

GEOMETRIES = {  # name: (H, I, K)
    'ds-v4-flash': (4096, 2048, 6), 'ds-v4-pro': (7168, 3072, 6), 'ds-v3': (7168, 2048, 8),
    'kimi-k2': (7168, 2048, 8), 'qwen3-235b': (4096, 1536, 8), 'qwen3-30b': (2048, 768, 8),
    'mixtral-8x7b': (4096, 14336, 2),
}
FP8_RATE_PATHS = ('mxfp8', 'w4a8', 'fp8_block')  # the bench's floor uses the FP8 rate for these
STAGE_TARGET = 1.3

# What limits a cell over the target, by path and regime (decode: T <= 64).
# Each is a measured finding; the section of docs/benchmarks.md that has it
# is named in brackets.
LIMITS = {
    ('bf16', 'decode'): 'weights streamed below the copy bandwidth by the 128-row HGMMA tile '
                        '["bf16 on the wgmma tile at every T"]',
    ('bf16', 'above'): 'partial tiles: the wgmma\'s M is 64 rows a warpgroup, so a tile of 90 rows '
                       'does 128 rows of tensor work (swapped where experts get 128-512 rows: '
                       'pro T = 2048 0.91-0.93; not at 8192, where swapping lost 1.5-3 %), and 128-row '
                       'tiles at 0.94 of cuBLAS\'s sustained rate (dense lab sustained: 637 TFLOP/s; '
                       'L2 does not bind it) ["The bench at the power cap", "The bf16 tile swapped"]',
    ('fp8_block', 'decode'): 'instructions: the producer widens E4M3 to fp16 and the consumers '
                             'promote per 128 K on 3 warps per scheduler (0.38 IPC; weights at '
                             '2.5 TB/s, not HBM-bound) ["Decode on the register tile"]',
    ('fp8_block', 'above'): 'exact sums on fp16 HGMMA, half the FP8 rate the floor assumes (see '
                            'the tile-rate column), plus widening E4M3 to fp16; fp8_fast_accum '
                            '(QGMMA, opt-in) trades exactness for the FP8 rate ["Exact FP8-BLOCK on '
                            'fp16 HGMMA"]',
    ('mxfp8', 'decode'): 'instructions: widening plus the activations\' per-32 multipliers made '
                         'per stage by the producer ["Decode on the register tile"]',
    ('mxfp8', 'above'): 'exact sums on fp16 HGMMA (half the FP8 rate) with per-32 scales folded '
                        'into the operands and promoted per 128 K ["The FP8 register tile at 128 '
                        'activation rows"]',
    ('w4a8', 'decode'): 'instructions: no sm_90 instruction widens E2M1, so the consumers build '
                        'fp16 from nibbles (1-4 instructions a pair); mega\'s 80 M warp instructions a forward '
                        'at flash T = 8 take the whole floor at the issue limit, nibbles and multipliers '
                        '46 % of them '
                        '["Decode on the register tile", "Where the paired decode tile waits"]',
    ('w4a8', 'above'): 'instructions: E2M1 widened to fp16 in the consumers, fp16 HGMMA at half '
                       'the FP8 rate ["W4A8 on the register tile"]',
    ('nvfp4', 'decode'): 'instructions: both operands widened from E2M1 with their E4M3 scales '
                         '(Hopper has no FP4 tensor instruction) ["NVFP4 on the register tile"]',
    ('nvfp4', 'above'): 'instructions: both operands widened from E2M1 to fp16 by the producer '
                        'and consumers ["NVFP4 on the register tile"]',
}


def parse(path, cells, head_info):
    """cells[(path, backend, geometry, T)] = {column: value}; head_info: rates."""
    for line in open(path):
        m = re.match(r'- copy bandwidth .*: ([\d.]+) TB/s', line)
        if m:
            head_info['copy'] = float(m.group(1)) * 1e12
        m = re.match(r'- BF16 GEMM .*: ([\d.]+) TFLOP/s', line)
        if m:
            head_info['bf16'] = float(m.group(1)) * 1e12
        m = re.match(r'- FP8 E4M3 GEMM .*: ([\d.]+) TFLOP/s', line)
        if m:
            head_info['fp8'] = float(m.group(1)) * 1e12
        m = re.match(r'- emulated group of (\d+) ranks', line)
        if m:
            head_info['ranks'] = int(m.group(1))
    for head, row in table_rows(path):
        for name, value in zip(head[2:], row[2:]):
            words = name.split(' ')  # path, backend, column ("stage", "fwd ratio", ...)
            if len(words) < 3:
                continue
            try:
                cells.setdefault((words[0], words[1], row[0], int(row[1])), {})[' '.join(words[2:])] = float(value)
            except ValueError:
                pass  # n/a, err


def regime(T):
    return 'decode' if T <= 64 else 'above'


def flop_us(geometry, T, rate, ranks):
    H, I, K = GEOMETRIES[geometry]
    return 1e6 * 2.0 * T * K * 3.0 * H * I * ranks / rate


def split_table(cells, info):
    print('| path | geometry | T | stage (us) | floor (us) | bound | stage / floor | stage / floor at the tile\'s rate | fwd (us) | fwd / floor | limit (over 1.3x) |')
    print('|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|')
    for (path, backend, geo, T), c in sorted(cells.items()):
        if backend != 'split' or 'stage' not in c or 'floor' not in c:
            continue
        fp8 = path in FP8_RATE_PATHS
        t_flops = flop_us(geo, T, info['fp8'] if fp8 else info['bf16'], info['ranks'])
        bound = 'FLOPs' if abs(c['floor'] - t_flops) <= 0.01 * c['floor'] else 'bytes'
        # the exact tiles issue fp16 HGMMA: the FLOP term at the BF16 rate
        own = max(c['floor'] if bound == 'bytes' else 0.0, flop_us(geo, T, info['bf16'], info['ranks']))
        ratio = c['stage'] / c['floor']
        limit = '' if ratio <= STAGE_TARGET else LIMITS.get((path, regime(T)), '?')
        fwd = c.get('fwd')
        fwd_us = '' if fwd is None else '%.1f' % fwd
        fwd_ratio = '' if fwd is None else '%.2f' % (fwd / c['floor'])
        print(f"| {path} | {geo} | {T} | {c['stage']:.1f} | {c['floor']:.1f} | {bound} | {ratio:.2f} | "
              f"{c['stage'] / own:.2f} | {fwd_us} | {fwd_ratio} | {limit} |")


def mega_table(cells):
    print('| path | geometry | T | mega fwd (us) | floor (us) | fwd / floor | target | mega / split fwd |')
    print('|---|---|---:|---:|---:|---:|---:|---:|')
    for (path, backend, geo, T), c in sorted(cells.items()):
        if backend != 'mega' or 'fwd' not in c or 'floor' not in c:
            continue
        target = 1.15 if T <= 512 else 1.25
        split = cells.get((path, 'split', geo, T), {}).get('fwd')
        vs = '' if split is None else f"{c['fwd'] / split:.3f}"
        print(f"| {path} | {geo} | {T} | {c['fwd']:.1f} | {c['floor']:.1f} | {c['fwd'] / c['floor']:.2f} | "
              f"{target:.2f} | {vs} |")


def main(argv):
    if not argv:
        sys.exit(__doc__)
    missing = [p for p in argv if not os.path.isfile(p)]
    if missing:
        sys.exit('issue_tables: no such file: ' + ', '.join(missing))
    cells, info = {}, {'ranks': 1}
    for p in argv:
        parse(p, cells, info)
    missing = [k for k in ('copy', 'bf16', 'fp8') if k not in info]
    if missing:
        sys.exit('issue_tables: no ceilings (' + ', '.join(missing) + ') in the files')
    unknown = sorted({k[2] for k in cells} - set(GEOMETRIES))
    if unknown:
        sys.exit('issue_tables: unknown geometry ' + ', '.join(unknown))
    if not cells:
        sys.exit('issue_tables: no cells (run the bench with --backends split,mega)')
    split_table(cells, info)
    print()
    mega_table(cells)


if __name__ == '__main__':
    main(sys.argv[1:])
