#!/usr/bin/env python3
"""Compare `moe_ep bench --out` tables: A files against B files (repeats of
each averaged), per geometry, T and timed column (stage, fwd).

  scripts/bench_compare.py A1.md [A2.md ...] -- B1.md [B2.md ...]

Prints a markdown table: mean A, mean B, B / A, and the spread of the
repeats (largest / smallest - 1 over A's and B's files), so that a change
smaller than the spread reads as noise."""
import os
import re
import sys


def parse(path):
    """{(geometry, T, column): microseconds} of every table in the file."""
    cells, head = {}, None
    for line in open(path):
        if line.startswith('| geometry'):
            head = [c.strip() for c in line.strip().strip('|').split('|')]
        elif line.startswith('| ') and head and not line.startswith('|---'):
            row = [c.strip() for c in line.strip().strip('|').split('|')]
            if len(row) != len(head) or not row[1].isdigit():
                continue
            for name, value in zip(head[2:], row[2:]):
                m = re.match(r'([\d.]+)', value)
                if m and (name.endswith(' stage') or name.endswith(' fwd')):
                    cells[(row[0], int(row[1]), name)] = float(m.group(1))
    return cells


def main(argv):
    if '--' not in argv:
        sys.exit(__doc__)
    cut = argv.index('--')
    missing = [p for p in argv if p != '--' and not os.path.isfile(p)]
    if missing:
        sys.exit('bench_compare: no such file: ' + ', '.join(missing))
    a_runs, b_runs = [parse(p) for p in argv[:cut]], [parse(p) for p in argv[cut + 1:]]
    if not a_runs or not b_runs:
        sys.exit(__doc__)
    keys = set.intersection(*(set(r) for r in a_runs + b_runs))
    print('| column | geometry | T | A (us) | B (us) | B / A | spread |')
    print('|---|---|---:|---:|---:|---:|---:|')
    for key in sorted(keys, key=lambda k: (k[2], k[0], k[1])):
        a = [r[key] for r in a_runs]
        b = [r[key] for r in b_runs]
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        spread = max(max(a) / min(a), max(b) / min(b)) - 1
        print(f'| {key[2]} | {key[0]} | {key[1]} | {ma:.1f} | {mb:.1f} | {mb / ma:.3f} | {100 * spread:.1f} % |')


if __name__ == '__main__':
    main(sys.argv[1:])
