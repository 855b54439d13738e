#!/usr/bin/env python3
"""Kernel lab, offline: a model of mega's GEMM items at decode, to ask how much of a forward
the item schedule costs (the tail of few long items, GEMM2 waiting for its expert's GEMM1)
and what finer items or another order would give. Not a measurement: a guide for which
variant to build and time on the device.

Model: B blocks (2 an SM) claim items in the kernel's order (every GEMM1 item, expert by
expert, then every GEMM2 item); a GEMM2 item starts once all GEMM1 items of its expert are
done. A running item streams its weight bytes at min(cap, BW / running) KB/us (HBM shared
evenly, each block capped by its bytes in flight) after a fixed cost `o` us (ring fill,
epilogue, claim). The forward adds `s0` us before the first GEMM item (launch, count,
dispatch) and `e0` after the last (combine, exit).

  dev/decode_schedule_sim.py [--geo flash|pro] [--T 8] [--ranks 1] [--path mxfp8] [--cap 30]
                             [--o 2] [--bn 256] [--order kernel|interleave] [--g2 all|stream]
                             [--tail-cap 0] [--seed 1]"""
import argparse
import heapq
import random

GEOS = {"flash": (4096, 2048, 256, 6), "pro": (7168, 3072, 384, 6)}  # H, I, E, K
WB = {"mxfp8": 1 + 1 / 32, "fp8_block": 1 + 4 / 128 / 128, "w4a8": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 16, "bf16": 2}


def experts_hit(E_local, rows, rng):
    hit = {}
    for _ in range(rows):
        e = rng.randrange(E_local)
        hit[e] = hit.get(e, 0) + 1
    return sorted(hit)


def items_of(args, rng):
    H, I, E, K = GEOS[args.geo]
    E_local = E // 8 * args.ranks  # the slice's experts (E / 8) times the emulated ranks
    rows = args.T * K * args.ranks
    hit = experts_hit(E_local, rows, rng)
    wb = WB[args.path]
    n1, n2 = 2 * I // args.bn, H // args.bn
    kb1, kb2 = args.bn * H * wb / 1e3, args.bn * I * wb / 1e3
    g1 = [(1, e, kb1, j) for e in hit for j in range(n1)]
    g2 = [(2, e, kb2, 0) for e in hit for _ in range(n2)]
    if args.order == "interleave":  # each expert's GEMM2 items right after the GEMM1 items of the expert two on
        out, lag = [], 2
        for i, e in enumerate(hit):
            out += [x for x in g1 if x[1] == e]
            if i >= lag:
                out += [x for x in g2 if x[1] == hit[i - lag]]
        out += [x for x in g2 if x[1] in hit[max(0, len(hit) - lag):]]
        return out, sum(x[2] for x in g1 + g2)
    return g1 + g2, sum(x[2] for x in g1 + g2)


def simulate(args, items):
    """Processor sharing in time steps of dt us."""
    dt = 0.05
    t = args.s0
    free = list(range(args.blocks))
    nxt = 0
    g1_left, n1 = {}, {}
    for g, e, _, j in items:
        if g == 1:
            g1_left[e] = g1_left.get(e, 0) + 1
            n1[e] = n1.get(e, 0) + 1
    g1_cols = {e: [False] * n for e, n in n1.items()}  # GEMM1 items done, by column block

    def g2_waits(r):
        """A GEMM2 item waits: for all of its expert's GEMM1 (--g2 all), or, streaming
        (--g2 stream), for the GEMM1 item of its next K stage (stage j: GEMM1 column block j)."""
        if r[3] != 2:
            return False
        if args.g2 == "all":
            return g1_left[r[4]] > 0
        cols, kb = g1_cols[r[4]], r[6]
        ready = 0
        while ready < len(cols) and cols[ready]:
            ready += 1
        return r[2] <= 0 and kb - r[1] >= kb * ready / len(cols) - 1e-9

    running = []  # [block, remaining KB, overhead left, gemm, expert, column block, KB]
    done_t = 0.0
    while nxt < len(items) or running:
        while free and nxt < len(items):
            g, e, kb, j = items[nxt]
            nxt += 1
            running.append([free.pop(), kb, args.o, g, e, j, kb])
        active = [r for r in running if r[2] <= 0 and not g2_waits(r)]
        cap = args.tail_cap if args.tail_cap > 0 and nxt >= len(items) else args.cap
        rate = min(cap, args.bw / max(1, len(active)))
        for r in running:
            if g2_waits(r):
                continue  # waiting for its expert's GEMM1
            if r[2] > 0:
                r[2] -= dt
            else:
                r[1] -= rate * dt
        t += dt
        for r in [r for r in running if r[1] <= 0]:
            running.remove(r)
            free.append(r[0])
            if r[3] == 1:
                g1_left[r[4]] -= 1
                g1_cols[r[4]][r[5]] = True
            done_t = t
    return done_t + args.e0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--geo", default="flash")
    p.add_argument("--T", type=int, default=8)
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--path", default="mxfp8")
    p.add_argument("--blocks", type=int, default=264)
    p.add_argument("--bw", type=float, default=4270.0, help="KB/us of HBM for all blocks")
    p.add_argument("--cap", type=float, default=30.0, help="KB/us one block streams at most")
    p.add_argument("--o", type=float, default=2.0, help="us an item streams nothing (fill, epilogue, claim)")
    p.add_argument("--s0", type=float, default=5.0)
    p.add_argument("--e0", type=float, default=3.0)
    p.add_argument("--bn", type=int, default=256, help="weight rows an item")
    p.add_argument("--order", default="kernel")
    p.add_argument("--tail-cap", type=float, default=0.0,
                   help="KB/us a block streams at most once every item is claimed (0: --cap): the tail with more in flight")
    p.add_argument("--g2", default="all", help="all: GEMM2 waits for its expert's GEMM1; stream: stage by stage")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = random.Random(args.seed)
    items, kb = items_of(args, rng)
    floor = kb / args.bw
    t = simulate(args, items)
    print(f"{args.path} {args.geo} T {args.T} ranks {args.ranks}: {len(items)} items, {kb / 1e3:.0f} MB, "
          f"floor {floor:.1f} us, model {t:.1f} us = {t / floor:.2f}x (cap {args.cap}, o {args.o}, bn {args.bn}, {args.order}, g2 {args.g2}, tail cap {args.tail_cap})")


if __name__ == "__main__":
    main()
