"""Shared by the Python tests: finds the package and the library in a checkout,
and runs a module's test_* functions when pytest is not there.

The package: an installed moe_ep, else python/ of this checkout. The library:
$MOE_EP_LIBRARY, else the package's own copy, else build/libmoe_ep.so
(what scripts/test.sh builds).
"""
import os
import sys
import time
import traceback
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:
    import moe_ep  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import moe_ep  # noqa: F401
if not os.path.exists(moe_ep.library_path()):
    os.environ["MOE_EP_LIBRARY"] = os.path.join(ROOT, "build", "libmoe_ep.so")

SkipTest = unittest.SkipTest


def run_all(namespace):
    """Runs every test_* function of a module; exits 1 if any failed."""
    tests = [(n, f) for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    print(f"moe_ep from {os.path.dirname(moe_ep.__file__)}, library {moe_ep.library_path()}")
    for name, fn in tests:
        t0 = time.time()
        try:
            fn()
            status = "passed"
        except SkipTest as e:
            status = f"skipped ({e})"
        except Exception:
            traceback.print_exc()
            status = "failed"
        counts[status.split()[0]] += 1
        print(f"{name}: {status} ({time.time() - t0:.2f} s)", flush=True)
    print(", ".join(f"{v} {k}" for k, v in counts.items()))
    sys.exit(1 if counts["failed"] else 0)
