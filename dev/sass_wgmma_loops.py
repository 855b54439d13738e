#!/usr/bin/env python3
"""Kernel lab: the wgmma loops of a cubin, by their SASS. Each run of
HGMMA / QGMMA instructions of one shape (at most 200 instructions apart) is
one loop body; prints its wgmmas, its instructions from the first wgmma to
the last, and the counts that grow when ptxas rematerialises (R2UR: a
descriptor moved from vector to uniform registers; IMAD, LDS).
  dev/sass_wgmma_loops.py FILE.cubin [cuobjdump]
e.g. PTXAS_MEGA_CUBIN=/tmp/m.cubin scripts/ptxas_mega.sh 128 FP8_RS 128 &&
     dev/sass_wgmma_loops.py /tmp/m.cubin build-sass-tools/unpacked/nvidia/cu13/bin/cuobjdump"""
import collections, re, subprocess, sys

if len(sys.argv) < 2:
    sys.exit(__doc__)
tool = sys.argv[2] if len(sys.argv) > 2 else 'cuobjdump'
sass = subprocess.run([tool, '-sass', sys.argv[1]], capture_output=True, text=True, check=True).stdout
code = [re.sub(r'^\s*/\*[0-9a-f]+\*/\s+', '', l).strip() for l in sass.splitlines() if re.match(r'\s+/\*[0-9a-f]{4,5}\*/', l)]
runs = []  # [shape, first, last, wgmmas]
for i, l in enumerate(code):
    m = re.search(r'[HQ]GMMA\.(64x\d+x\d+)', l)
    if not m:
        continue
    if runs and runs[-1][0] == m.group(1) and i - runs[-1][2] < 200:
        runs[-1][2], runs[-1][3] = i, runs[-1][3] + 1
    else:
        runs.append([m.group(1), i, i, 1])
for shape, a, b, n in runs:
    ops = collections.Counter((l.split()[1] if l.startswith('@') else l.split()[0]).split('.')[0] for l in code[a:b + 1])
    print(f'{shape:10s} wgmmas {n:3d}  instructions {b - a + 1:4d}  R2UR {ops["R2UR"]:3d}  IMAD {ops["IMAD"]:3d}  LDS {ops["LDS"]:3d}')
