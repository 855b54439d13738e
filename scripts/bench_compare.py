#!/usr/bin/env python3
"""Compare `moe_ep bench --out` tables: A files against B files (and C, D ...
files; repeats of each averaged), per geometry, T and timed column (stage, fwd).

  scripts/bench_compare.py A1.md [A2.md ...] -- B1.md [B2.md ...] [-- C1.md ...]

Prints a markdown table: mean A, then mean B and B / A (and so on for each
variant against the base A), and the spread of the repeats (largest /
smallest - 1, the worst over all variants' files), so that a change smaller
than the spread reads as noise."""
import os
import re
import sys

from bench_md import table_rows


def parse(path):
    """{(geometry, T, column): microseconds} of every table in the file."""
    cells = {}
    for head, row in table_rows(path):
        for name, value in zip(head[2:], row[2:]):
            m = re.match(r'([\d.]+)', value)
            if m and (name.endswith(' stage') or name.endswith(' fwd')):
                cells[(row[0], int(row[1]), name)] = float(m.group(1))
    return cells


def split_groups(argv):
    """File lists between the `--` separators."""
    groups, current = [], []
    for arg in argv:
        if arg == '--':
            groups.append(current)
            current = []
        else:
            current.append(arg)
    groups.append(current)
    return groups


def main(argv):
    if '--' not in argv:
        sys.exit(__doc__)
    missing = [p for p in argv if p != '--' and not os.path.isfile(p)]
    if missing:
        sys.exit('bench_compare: no such file: ' + ', '.join(missing))
    groups = [[parse(p) for p in files] for files in split_groups(argv)]
    if any(not runs for runs in groups):
        sys.exit(__doc__)
    names = [chr(ord('A') + i) for i in range(len(groups))]
    keys = set.intersection(*(set(r) for runs in groups for r in runs))
    head = ' | '.join(f'{n} (us) | {n} / A' for n in names[1:])
    print(f'| column | geometry | T | A (us) | {head} | spread |')
    print('|---|---|---:|---:|' + '---:|---:|' * (len(names) - 1) + '---:|')
    for key in sorted(keys, key=lambda k: (k[2], k[0], k[1])):
        values = [[r[key] for r in runs] for runs in groups]
        means = [sum(v) / len(v) for v in values]
        spread = max(max(v) / min(v) for v in values) - 1
        cells = ' | '.join(f'{m:.1f} | {m / means[0]:.3f}' for m in means[1:])
        print(f'| {key[2]} | {key[0]} | {key[1]} | {means[0]:.1f} | {cells} | {100 * spread:.1f} % |')


if __name__ == '__main__':
    main(sys.argv[1:])
