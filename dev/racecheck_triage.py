#!/usr/bin/env python3
"""Sorts compute-sanitizer racecheck reports into known and new.

    dev/racecheck_triage.py LOG [LOG ...]     (exit 1 when a report is new)

Reads either report form (the default "Race reported between A access at
F+off in FILE:LINE / and B access at ... in FILE:LINE [N hazards]", or
--racecheck-report hazard's "Potential XXX hazard ... / Write Thread ... in
FILE:LINE / Read Thread ... in FILE:LINE"), looks each access's line up in
the source tree, and calls a report known when it is one of:

- item-loop: both accesses on a line of mega.cu naming sh->item or sh->ok
  (thread 0 writes, __syncthreads, every thread reads). racecheck reports
  this pattern in mega's bf16 instance although every thread passes the
  same barriers 0; dev/wgmma_lab/racecheck_named.cu reproduces it in a
  race-free kernel with gemm_run's descriptor queue (modes 6, 10-12, 16;
  clean without the queue: 14, 15; thirty-eighth session, docs/benchmarks.md);
- bulk-reuse: a warning between two bulk copies (hopper.cuh bulk_load /
  tma_load_2d) into the same bytes: the ring's slot reuse, ordered through
  the consumers' full wait and empty arrival, which racecheck does not
  follow (lab mode 13);
- give-up-flag: hopper.cuh's bounded wait's tile_wait_failed (volatile,
  unsynchronised by design).

Anything else is printed as NEW with its two source lines."""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
LOC = re.compile(r" at (.+?)\+0x[0-9a-f]+ in ([\w./-]+\.(?:cu|cuh|c|h)):(\d+)")
START = re.compile(r"(Error|Warning): (Race reported between|.*Potential \w+ hazard)")


def source_line(name, line, cache={}):
    base = os.path.basename(name)
    if base not in cache:
        cache[base] = None
        for d, _, files in os.walk(ROOT):
            if base in files and "/build" not in d:
                cache[base] = open(os.path.join(d, base), errors="replace").read().split("\n")
                break
    lines = cache[base]
    return lines[line - 1].strip() if lines and 0 < line <= len(lines) else "?"


def reports(path):
    """Yields (kind, [(function, file, line), ...]) per report."""
    kind, locs = None, []
    for raw in open(path, errors="replace"):
        m = START.search(raw)
        if m:
            if kind: yield kind, locs
            kind, locs = m.group(1), []
        elif "Host Frame" in raw or "SUMMARY" in raw:
            if kind: yield kind, locs
            kind, locs = None, []
            continue
        if kind:
            locs += [(fn, os.path.basename(f), int(n)) for fn, f, n in LOC.findall(raw)]
    if kind: yield kind, locs


def classify(kind, locs):
    text = [source_line(f, n) for _, f, n in locs]
    funcs = [fn for fn, _, _ in locs]
    # The give-up flag's reports may name an inlined caller's frame too (3 locations).
    if any(fn.startswith(("mbar_wait_bounded", "tile_wait")) for fn in funcs) or any("tile_wait_failed" in t for t in text):
        return "give-up-flag"
    if len(locs) != 2:
        return None
    if {f for _, f, _ in locs} == {"mega.cu"} and all("sh->item" in t or "sh->ok" in t for t in text):
        return "item-loop"
    if kind == "Warning" and all(fn.startswith(("bulk_load", "tma_load")) for fn in funcs):
        return "bulk-reuse"
    return None


def main():
    any_new = False
    for path in sys.argv[1:]:
        counts, new = {}, 0
        for kind, locs in reports(path):
            c = classify(kind, locs)
            if c:
                counts[c] = counts.get(c, 0) + 1
                continue
            new += 1
            print("NEW %s in %s:" % (kind, path))
            for fn, f, n in locs:
                print("    %s  %s:%d  %s" % (fn, f, n, source_line(f, n)))
        print("%s: known %s, new %d" % (path, counts or "none", new))
        any_new = any_new or new > 0
    return 1 if any_new else 0


if __name__ == "__main__":
    sys.exit(main())
