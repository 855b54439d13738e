#!/usr/bin/env python3
"""Kernel lab: Nsight Compute's per-instruction samples (dev/ncu_hot.sh's CSV:
`ncu --import R --page source --csv --print-source sass`) summed by source line.

The CSV has SASS addresses only; the line of each instruction comes from
nvdisasm's line table (-g) of the same binary's cubin (the build has -lineinfo).
Offsets are taken from the function's first instruction (the CSV's first row).

  dev/ncu_lines.py CSV BINARY|SASS [FUNCTION] [top]
    CSV       dev/ncu_hot.sh's .csv (one kernel, one launch)
    BINARY    the moe_ep binary that was profiled: its cubins are extracted
              (cuobjdump -xelf all) and disassembled (nvdisasm -g -c), from PATH
              or scripts/sass_tools.sh's build-sass-tools/ (~15 s for mega's)
    SASS      or such a disassembly made before
    FUNCTION  the mangled kernel name, e.g. _Z12mega_forwardILi16ELi7ELi32EEv11mega_params;
              left out (or "-"): the function whose instruction count is the CSV's
              (an instance of the profiled kernel; printed, check it is the one)

Prints the source lines with the most samples (and their share of executed
instructions), then every mbarrier wait with its samples and the source line
before it (which wait it is)."""
import atexit
import csv
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile


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


def tool(name):
    """cuobjdump / nvdisasm from PATH, else from scripts/sass_tools.sh's wheels."""
    found = shutil.which(name)
    if found:
        return found
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'build-sass-tools')
    for base, _, files in os.walk(root):
        if name in files and base.endswith('bin'):
            return os.path.join(base, name)
    sys.exit('%s not found: run scripts/sass_tools.sh once (it fetches it)' % name)


def disassemble(binary):
    """nvdisasm -g -c of every cubin in BINARY, one text (functions by section)."""
    work = tempfile.mkdtemp()
    atexit.register(shutil.rmtree, work, True)
    subprocess.run([tool('cuobjdump'), '-xelf', 'all', os.path.abspath(binary)], cwd=work,
                   check=True, stdout=subprocess.DEVNULL)
    out = os.path.join(work, 'all.sass')
    with open(out, 'w') as f:
        for cubin in sorted(glob.glob(os.path.join(work, '*.cubin'))):
            subprocess.run([tool('nvdisasm'), '-g', '-c', cubin], stdout=f, check=True)
    return out


def function_of(sass_path, count):
    """The function of SASS_PATH with COUNT instructions (the CSV's rows)."""
    counts, cur = {}, None
    for text in open(sass_path, errors='replace'):
        if text.startswith('//----'):
            m = re.search(r'\.text\.(\S+)', text)
            cur = m.group(1) if m else None
        elif cur and re.match(r'\s*/\*[0-9a-f]{4,}\*/', text):
            counts[cur] = counts.get(cur, 0) + 1
    match = [f for f, n in counts.items() if n == count]
    if len(match) != 1:
        sys.exit('%d functions have %d instructions: name one (%s)' % (len(match), count, ' '.join(match[:4])))
    return match[0]


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    rows = samples(sys.argv[1])
    sass = sys.argv[2]
    if open(sass, 'rb').read(4) == b'\x7fELF':
        sass = disassemble(sass)
    function = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != '-' else function_of(sass, len(rows))
    print('function: %s' % function)
    table = line_table(sass, function)
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 30
    if not table:
        sys.exit('no instructions of %s in %s' % (function, sass))
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
