#!/usr/bin/env python3
"""The bench table scripts (scripts/bench_compare.py, scripts/issue_tables.py)
on a small synthetic `moe_ep bench --out` file: columns found, ratios, the
floor's bounding term, and the limit given for a cell over 1.3x."""
import os
import subprocess
import sys
import tempfile

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'scripts')

# ds-v4-flash T = 8: 48 rows, 2 * 48 * 3 * 4096 * 2048 FLOPs, 3.0 us at 800 TFLOP/s: far
# under a floor of 284.8 us, so "bytes".
# T = 2048 with a floor equal to its FLOPs term at 800 TFLOP/s: "FLOPs".
FLOPS_2048 = 1e6 * 2.0 * 2048 * 6 * 3.0 * 4096 * 2048 / 800e12

BENCH = f"""# moe_ep bench

- ceilings sustained (the floors use these): median of 20 after 500 ms of the same step back to back, the power-capped state FLOP-bound cells are timed in
- copy bandwidth (D2D memcpy of 2 GiB, read + write, sustained): 4.27 TB/s
- BF16 GEMM 8192^3 (cublasGemmEx, fp32 compute, sustained): 800 TFLOP/s
- FP8 E4M3 GEMM 8192^3 (cublasLt TN, fp32 compute, bf16 out, sustained): 1600 TFLOP/s
- the same in a burst (median of 10 after 3, the GPU idle before; not used): copy 4.30 TB/s, BF16 900 TFLOP/s, FP8 1800 TFLOP/s

| geometry | T | bf16 split stage | bf16 split floor | bf16 split ratio | bf16 split fwd | bf16 split fwd ratio | bf16 mega stage | bf16 mega floor | bf16 mega ratio | bf16 mega fwd | bf16 mega fwd ratio |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| ds-v4-flash | 8 | 300.0 | 284.8 | 1.05 | 320.0 | 1.12 | n/a | 284.8 | n/a | 310.0 | 1.09 |
| ds-v4-flash | 2048 | {2 * FLOPS_2048:.1f} | {FLOPS_2048:.1f} | 2.00 | 1300.0 | 1.69 | n/a | {FLOPS_2048:.1f} | n/a | 1400.0 | 1.82 |
"""

failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
    print(('ok   ' if ok else 'FAIL ') + what)


def run(script, *args):
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *args], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


with tempfile.TemporaryDirectory() as d:
    a, b = os.path.join(d, 'a.md'), os.path.join(d, 'b.md')
    open(a, 'w').write(BENCH)
    open(b, 'w').write(BENCH.replace('| 320.0 |', '| 352.0 |'))
    rc, out = run('issue_tables.py', a)
    check(rc == 0, 'issue_tables.py runs')
    rows = [line for line in out.splitlines() if line.startswith('| bf16 |')]
    decode = [l for l in rows if l.split('|')[3].strip() == '8']
    large = [l for l in rows if l.split('|')[3].strip() == '2048']
    check(len(decode) == 2 and len(large) == 2, 'one split and one mega row per T')
    check(any('| bytes | 1.05 |' in l for l in decode), 'T = 8: the floor is bytes, stage / floor 1.05')
    check(any('| FLOPs | 2.00 |' in l and "the wgmma's M" in l for l in large),
          'T = 2048: the floor is FLOPs, 2.00, with its limit')
    mega = f'| {1400.0 / float(f"{FLOPS_2048:.1f}"):.2f} | 1.25 | 1.077 |'
    check(any(mega in l for l in large), 'mega row: fwd / floor, target 1.25, mega / split 1.077')
    rc, out = run('bench_compare.py', a, '--', b)
    check(rc == 0 and '| bf16 split fwd | ds-v4-flash | 8 | 320.0 | 352.0 | 1.100 |' in out,
          'bench_compare.py: B / A of a fwd cell')
    rc, out = run('issue_tables.py', os.path.join(d, 'missing.md'))
    check(rc != 0, 'a missing file is an error')

print(f'test_bench_tables: {failures} failed')
sys.exit(1 if failures else 0)
