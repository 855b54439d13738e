#!/usr/bin/env python3
"""Kernel lab: Nsight Compute's per-instruction samples (dev/ncu_hot.sh's CSV:
`ncu --import R --page source --csv --print-source sass`) summed by source line.

The CSV has SASS addresses only; the line of each instruction comes from
nvdisasm's line table (-g) of the same binary's cubin (the build has -lineinfo).
Offsets are taken from the function's first instruction (the CSV's first row).

  dev/ncu_lines.py CSV SASS FUNCTION [top]
    CSV       dev/ncu_hot.sh's .csv (one kernel, one launch)
    SASS      `nvdisasm -g -c CUBIN` output of the binary that was profiled
              (scripts/sass_tools.sh gives cuobjdump / nvdisasm on the CI machine;
              cuobjdump -xelf all BINARY extracts the cubins)
    FUNCTION  the mangled kernel name, e.g. _Z12mega_forwardILi16ELi7ELi32EEv11mega_params

Prints the source lines with the most samples (and their share of executed
instructions), then every mbarrier wait with its samples and the source line
before it (which wait it is)."""
import csv
import re
import sys


def line_table(sass_path, function):
    """{offset: ((file, line), instruction)} of FUNCTION's section."""
    table, cur, inside = {}, None, False
    for text in open(sass_path, errors='replace'):
        if text.startswith('//----'):
            inside = ('.text.' + function) in text
            continue
        if not inside:
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', text)
        if m:
            cur = (m.group(1).split('/')[-1], int(m.group(2)))
            continue
        m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*)', text)
        if m:
            table[int(m.group(1), 16)] = (cur, m.group(2).split(';')[0].strip())
    return table


def samples(csv_path):
    rows = list(csv.reader(open(csv_path, errors='replace')))
    hi = next(i for i, r in enumerate(rows) if any('Warp Stall Sampling (All' in c for c in r))
    h = rows[hi]
    body = [r for r in rows[hi + 1:] if len(r) == len(h)]
    ia = h.index('Address')
    iall = next(i for i, c in enumerate(h) if 'Warp Stall Sampling (All' in c)
    iex = next(i for i, c in enumerate(h) if c.strip() == 'Instructions Executed')
    num = lambda v: float(v.replace(',', '') or 0)
    base = int(body[0][ia], 16)
    return [(int(r[ia], 16) - base, num(r[iall]), num(r[iex])) for r in body]


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        sys.exit(2)
    table = line_table(sys.argv[2], sys.argv[3])
    rows = samples(sys.argv[1])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 30
    if not table:
        sys.exit('no instructions of %s in %s' % (sys.argv[3], sys.argv[2]))
    tot_s = sum(r[1] for r in rows) or 1
    tot_i = sum(r[2] for r in rows) or 1
    by_line = {}
    for off, s, n in rows:
        src = (table.get(off) or ((None, 0), ''))[0] or ('?', 0)
        a = by_line.setdefault(src, [0.0, 0.0])
        a[0] += s
        a[1] += n
    print('%d instructions (%d in the line table), %.0f samples, %.0f warp instructions executed'
          % (len(rows), len(table), tot_s, tot_i))
    print('samples  instructions  source line')
    for (f, ln), (s, n) in sorted(by_line.items(), key=lambda kv: -kv[1][0])[:top]:
        print('%6.1f%%  %6.1f%%       %s:%d' % (100 * s / tot_s, 100 * n / tot_i, f, ln))
    print('mbarrier waits (the wait and its branch), with the source line before them:')
    for k, (off, s, n) in enumerate(rows):
        ins = (table.get(off) or (None, ''))[1]
        if 'TRYWAIT' not in ins:
            continue
        s += rows[k + 1][1] if k + 1 < len(rows) else 0
        prev, j = None, k
        while j > 0 and prev is None:
            j -= 1
            src = (table.get(rows[j][0]) or (None, ''))[0]
            if src and src[0] != 'hopper.cuh':
                prev = '%s:%d' % src
        if s / tot_s >= 0.002:
            print('%6.1f%%  +0x%x  executed %.0f  %s  (after %s)' % (100 * s / tot_s, off, n, ins[:60], prev))


if __name__ == '__main__':
    main()
