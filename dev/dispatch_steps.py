#!/usr/bin/env python3
"""The decode forward's start, step by step, from a lab trace build's dumps.

  dev/dispatch_steps.py DUMP...   (MOE_EP_MEGA_TRACE_DUMP files of `moe_ep bench`; a trace build
                                   with dev/drafts/lab_dispatch_steps.patch: records of kind 100 + k
                                   are thread 0's time at the dispatch item's step k; the seventy-fifth
                                   session's dumps packed k into the time's top bits: kinds 125-130
                                   there, read with --packed)

Per dump label: the forward's first events from the first block's start (us): the count items,
the first dispatch item's start, each dispatch item's steps (1 x copies issued, 2 slots read,
3 x rows in, 4 thread 0's chunks encoded, 5 the block's chunks encoded, 6 folded; tw: stores
issued; stall: stores complete; end: counters raised), the first GEMM1 tile."""
import collections
import sys

STEPS = {101: "x issued", 102: "slots", 103: "x in", 104: "enc t0", 105: "enc blk", 106: "folded"}


def report(label, recs):
    z = min(r[2] for r in recs)
    us = lambda t: (t - z) / 1e3
    by = collections.defaultdict(list)
    for r in recs:
        by[r[1]].append(r)
    start = by.get(7, [])
    if start:
        print(f"{label}: blocks' starts {us(min(r[2] for r in start)):.2f} .. {us(max(r[2] for r in start)):.2f}, "
              f"their first claims {us(min(r[5] for r in start)):.2f} .. {us(max(r[5] for r in start)):.2f} us")
    count = by.get(1, [])
    if count:
        print(f"{label}: count items {len(count)}: start {us(min(r[2] for r in count)):.2f} .. end "
              f"{us(max(r[5] for r in count)):.2f} us")
    g1 = by.get(3, [])
    if g1:
        print(f"  first GEMM1 item claimed {us(min(r[2] for r in g1)):.2f}, its tile after the wait "
              f"{us(min(r[3] for r in g1)):.2f} us; last exit {us(max(r[5] for r in by.get(8, recs))):.2f}")
    steps = collections.defaultdict(dict)
    for k in STEPS:
        for r in by.get(k, []):
            steps[r[0]][k] = r[2]
    for r in sorted(by.get(2, []), key=lambda r: r[2]):
        s = steps.get(r[0], {})
        own = [t for k, t in s.items() if r[2] <= t <= r[5]]
        line = "  ".join(f"{STEPS[k]} +{(t - r[2]) / 1e3:.2f}" for k, t in sorted(s.items()) if r[2] <= t <= r[5])
        print(f"  dispatch blk {r[0]:3d} at {us(r[2]):6.2f}: {line}  stores issued +{(r[3] - r[2]) / 1e3:.2f}"
              f" complete +{r[4] / 1e3:.2f} end +{(r[5] - r[2]) / 1e3:.2f} us")


def unpack(recs):
    """--packed: the first run's step records (kind 100 + (24 | k), the time's low 56 bits)."""
    hi = (min(r[2] for r in recs if r[1] < 100) >> 56) << 56
    return [r if r[1] < 100 else (r[0], 100 + ((r[1] - 100) & 7), hi | r[2], hi | r[3], 0, hi | r[5]) for r in recs]


def main(paths):
    packed = "--packed" in paths
    paths = [p for p in paths if p != "--packed"]
    for p in paths:
        recs = collections.defaultdict(list)
        for line in open(p):
            f = line.split()
            if len(f) == 7:
                recs[f[0]].append(tuple(int(x) for x in f[1:]))
        for label, r in recs.items():
            report(label, unpack(r) if packed else r)


if __name__ == "__main__":
    main(sys.argv[1:])
