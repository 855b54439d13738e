#!/usr/bin/env python3
"""The mega item trace of decode-sized forwards: where each block's time goes.

  dev/trace_items.py DUMP...   (MOE_EP_MEGA_TRACE_DUMP files of `moe_ep bench`, a trace build)

Per dump label (path/geometry/T): the span of the forward; per item kind its
count, first start, last end, busy and input wait per block; for the GEMM items
the time after their wait (median, p10, p90) and the weight bytes they stream a
microsecond (each item: 256 weight rows x K); the blocks in a GEMM item over
time (10 bins: the tail); each block's last item end. Kinds start (a block's
entry to its first claim) and exit (mega_exit) frame the items."""
import collections
import sys

NAMES = {0: "send", 1: "count", 2: "dispatch", 3: "gemm1", 4: "gemm2", 5: "rows", 6: "combine", 7: "start", 8: "exit",
         9: "fold", 17: "g1 tiles", 18: "g2 tiles"}  # 17, 18: a GEMM run's tile releases (a draft's trace)
GEOS = {"ds-v4-flash": (4096, 2048), "ds-v4-pro": (7168, 3072)}
WEIGHT_BYTES = {"bf16": 2.0, "mxfp8": 1.0, "fp8_block": 1.0, "w4a8": 0.5, "nvfp4": 0.5}


def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else 0


def report(label, recs):
    path, geo, _ = label.split("/")
    H, I = GEOS.get(geo, (0, 0))
    wb = WEIGHT_BYTES.get(path, 1.0)
    z = min(r[2] for r in recs)
    end = max(r[5] for r in recs) - z
    blocks = sorted({r[0] for r in recs})
    items = [r for r in recs if r[1] < 7]
    if not items:
        print(f"{label}: no items recorded")
        return
    print(f"{label}: {len(items)} items, {len(blocks)} blocks, {end / 1e3:.1f} us from the first block's start to "
          f"the last exit; items {(min(r[2] for r in items) - z) / 1e3:.1f} .. {(max(r[5] for r in items) - z) / 1e3:.1f} us")
    by = collections.defaultdict(list)
    for r in recs:
        by[r[1]].append(r)
    for k, v in sorted(by.items()):
        busy = sum(r[5] - r[2] for r in v) / len(blocks) / 1e3
        wait = sum(r[3] - r[2] for r in v) / len(blocks) / 1e3
        line = (f"  {NAMES.get(k, k):8s} {len(v):6d} items  {(min(r[2] for r in v) - z) / 1e3:7.1f} .. "
                f"{(max(r[5] for r in v) - z) / 1e3:7.1f} us  busy {busy:6.1f}  wait {wait:6.1f} us a block")
        if k in (17, 18):  # from the previous release (or the run's start) to this one
            run = [(r[5] - r[2]) / 1e3 for r in v]
            line += f"  between releases p10/p50/p90 {q(run, .1):.1f}/{q(run, .5):.1f}/{q(run, .9):.1f} us"
        if k in (3, 4):
            run = [(r[5] - r[3]) / 1e3 for r in v]
            kb = 256 * (H if k == 3 else I) * wb / 1e3
            line += (f"  run p10/p50/p90 {q(run, .1):.1f}/{q(run, .5):.1f}/{q(run, .9):.1f} us"
                     f"  {kb:.0f} KB: {kb / max(q(run, .5), 1e-3):.1f} KB/us at p50")
            waited = [(r[3] - r[2]) / 1e3 for r in v if r[4] == 1]  # stall 1: the item took block_wait
            direct = [(r[3] - r[2]) / 1e3 for r in v if r[4] == 0]
            line += (f"\n           claim to tile: {len(direct)} items without a wait p50 {q(direct, .5):.2f} us,"
                     f" {len(waited)} through block_wait p50 {q(waited, .5):.2f} p90 {q(waited, .9):.2f} us")
        print(line)
    gemm = [r for r in recs if r[1] in (3, 4)]
    end = max(r[5] for r in items) - z  # the tail figures below: up to the last item's end
    if gemm:
        bins = 10
        occ = []
        for b in range(bins):
            t0, t1 = z + end * b / bins, z + end * (b + 1) / bins
            occ.append(sum(max(0, min(r[5], t1) - max(r[3], t0)) for r in gemm) / (t1 - t0))
        print("  blocks running a GEMM (after its wait), by tenths of the span: " + " ".join(f"{o:.0f}" for o in occ))
        last = [(max(r[5] for r in items if r[0] == b) - z) / 1e3 for b in blocks if any(r[0] == b for r in items)]
        print(f"  each block's last item end: min {min(last):.1f} p10 {q(last, .1):.1f} p50 {q(last, .5):.1f} "
              f"p90 {q(last, .9):.1f} max {max(last):.1f} us")
        first = [(min(r[3] for r in gemm if r[0] == b) - z) / 1e3 for b in {r[0] for r in gemm}]
        print(f"  each block's first GEMM run start: min {min(first):.1f} p50 {q(first, .5):.1f} max {max(first):.1f} us")


def main():
    for f in sys.argv[1:]:
        groups = collections.defaultdict(list)
        for line in open(f):
            lab, b, k, t0, tw, st, t1 = line.split()
            groups[lab].append((int(b), int(k), int(t0), int(tw), int(st), int(t1)))
        for lab, recs in groups.items():
            report(lab, recs)


if __name__ == "__main__":
    main()
