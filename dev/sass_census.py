#!/usr/bin/env python3
"""Kernel lab, CPU only: the register tile's loops in SASS, mega's instances
against split's for the same tile (docs/design.md, "Fiftieth session").

  dev/sass_census.py LIBMOE_EP.a [cuobjdump]
  e.g. dev/sass_census.py build/libmoe_ep.a build-sass-tools/unpacked/nvidia/cu13/bin/cuobjdump

A loop is a backward branch's body (instructions a stage, per thread). Per
format and tile rows: the consumer's K loops (the bodies holding 16 wgmmas)
and the producer's loop (the body holding the TMA issue and the widening at
128 rows; the TMA warp's loop at 64 rows or fewer), mega / split. The item
hook's branch (~20 instructions) sits in mega's 128-row producer body but runs
once a tile. cuobjdump: scripts/sass_tools.sh fetches one where CUDA has none.
Compare only libraries built by one nvcc from the trees in question (a
library rebuilt for another target with a draft applied holds the draft).
At a914f61 (this machine's nvcc 13.0): MXFP8 / W4A8 128 rows, producer 487 /
422; with dev/drafts/rs_tile_widen_immediates.patch 450 / 420; NVFP4 128
rows 850 / 831, with dev/drafts/rs_tile_nvfp4_byte_lookups.patch ~620."""
import collections
import os
import re
import subprocess
import sys
import tempfile

# mega_forward<BM, MODE, SB> (mega_common.cuh) and grouped_gemm_wgmma<KIND> (wgmma_gemm.cu:
# KIND_RS 8 + 4 x format + size, size 0..3 for 128, 64, 32, 16 rows)
FORMATS = {"fp8_block": (5, 128, 0), "mxfp8": (6, 32, 1), "w4a8": (7, 32, 2), "nvfp4": (8, 0, 3)}
SIZES = {128: 0, 64: 1, 32: 2, 16: 3}


def sass(tool, cubin, fun):
    out = subprocess.run([tool, "-sass", "-fun", fun, cubin], capture_output=True, text=True).stdout
    code = []
    for line in out.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,5})\*/\s+(.*?)\s*;", line)
        if m:
            code.append((int(m.group(1), 16), m.group(2).strip()))
    return code


def loops(code):
    """Bodies of backward branches: (length, body)."""
    at = {a: i for i, (a, _) in enumerate(code)}
    for i, (a, ins) in enumerate(code):
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", ins)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            j = at[int(m.group(1), 16)]
            yield i - j + 1, [x for _, x in code[j:i + 1]]


def census(code):
    consumer, producer = set(), set()
    for n, body in loops(code):
        wg = sum("GMMA" in x for x in body)
        if wg == 16 and n < 1500:
            consumer.add(n)
        elif wg == 0 and 30 < n < 1500 and any("UTMALDG" in x for x in body):
            producer.add(n)
    return sorted(consumer), sorted(producer)[:1]  # the innermost: the tiles' loops hold it


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    lib, tool = os.path.abspath(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "cuobjdump"
    tool = os.path.abspath(tool) if os.path.exists(tool) else tool
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["ar", "x", lib, "mega.cu.o", "wgmma_gemm.cu.o"], cwd=d, check=True)
        for o in ("mega.cu.o", "wgmma_gemm.cu.o"):
            subprocess.run([tool, "-xelf", "all", o], cwd=d, check=True, capture_output=True)
        cubins = {k: os.path.join(d, f) for f in os.listdir(d) if f.endswith(".cubin")
                  for k in ("mega", "split") if f.startswith("mega" if k == "mega" else "wgmma_gemm")}
        print("format     rows  consumer K loop mega / split     producer loop mega / split")
        for name, (mode, sb, fmt) in FORMATS.items():
            for rows, size in SIZES.items():
                mega = census(sass(tool, cubins["mega"], "_Z12mega_forwardILi%dELi%dELi%dEEv11mega_params" % (rows, mode, sb)))
                split = census(sass(tool, cubins["split"],
                                    "_Z18grouped_gemm_wgmmaILi%dEEv9gemm_args14CUtensorMap_stS1_" % (8 + 4 * fmt + size)))
                print(f"{name:10s} {rows:4d}  {str(mega[0]):14s} / {str(split[0]):14s}  {str(mega[1]):12s} / {split[1]}")


if __name__ == "__main__":
    main()
