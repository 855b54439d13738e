#!/usr/bin/env python3
"""The model of dev/drafts/mega_rs144_rows.patch's row layout (mega_tile_rows / mega_row_tile): an expert of
`rows` rows in m_e = ceil(rows / 144) tiles, 128 rows a tile, the excess over 128 m_e 16 more in each of the
first `big` tiles. Checks, for every row count up to 5000: each row in exactly one tile, tiles of 1-144 rows,
those past the first `big` at most 128 (the K loop at N <= 128), and the inverse exact. Prints the layouts
of the row counts of flash / pro T = 2048 and 8192."""
import math


def big_tiles(rows, m_e):
    return min(m_e, max(0, rows - 128 * m_e + 15) // 16)


def tiles(rows):
    m_e = math.ceil(rows / 144)
    big = big_tiles(rows, m_e)
    out = []
    for j in range(m_e):
        first = 128 * j + 16 * min(j, big)
        end = first + (144 if j < big else 128)
        out.append((first, min(end, rows) - first))
    return m_e, big, out


def row_tile(rows, m_e, p):
    big = big_tiles(rows, m_e)
    edge = 144 * big
    return p // 144 if p < edge else big + (p - edge) // 128


for rows in range(1, 5001):
    m_e, big, t = tiles(rows)
    covered = []
    for j, (first, n) in enumerate(t):
        assert 1 <= n <= 144 and (j < big or n <= 128), (rows, t)
        for p in range(first, first + n):
            assert row_tile(rows, m_e, p) == j, (rows, p, j)
            covered.append(p)
    assert covered == list(range(rows)), rows
print("rows 1..5000: every row in one tile, widths and inverse as specified")
for rows in (256, 272, 384, 400, 1024, 1536):
    m_e, big, t = tiles(rows)
    print(f"{rows:5d} rows: {m_e} tiles, {big} of them past 128: widths {[n for _, n in t]}")
