"""Pytest tests that allocate GPU memory through the fake CUDA runtime
(ctypes), for `vramprof check --max-peak-per-test` (cmd/vramprof's
pertest e2e test). Each test keeps its own books (Books below): the bytes it
allocated and still has live, the most it had live at once, and what it
left live when it returned. At exit the module writes them to
$VRAMPROF_TRUTH, keyed by the node id pytest itself gives the test
(PYTEST_CURRENT_TEST, its parameter set cut off: frames cannot tell one
parameter set from another, so vramprof sums them into one test).

The figures, by the tests' own arithmetic:
  test_small            8 MiB and 4 MiB + 512 live together, both freed:
                        peak 12583424, leak 0
  test_leaks            16 MiB freed, then 3 MiB + 4096 kept in KEPT (never
                        freed): peak 16777216, leak 3149824
  TestModel::test_big   64 MiB and 32 MiB live together, freed: peak
                        100663296, leak 0 (over the limits file's 80MiB)
  test_param[1], [2]    n MiB each, freed: one test, peak 2097152, leak 0
and at module level (no test) 1 MiB that stays live: in no test's figures.

Usage: python3 -m pytest test_gpu.py  (FAKECUDA_LIB names the runtime)
"""

import atexit
import ctypes
import json
import os
import re
import sys

import pytest

MiB = 1 << 20

cudart = ctypes.CDLL(os.environ["FAKECUDA_LIB"])
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaFree.argtypes = [ctypes.c_void_p]

BOOKS = {}  # node id -> {"peak_bytes", "peak_line", "leaked_bytes", "live", "allocations"}
KEPT = []  # what test_leaks never frees


def node_id():
    # pytest's own name of the running test: "path::[Class::]name[param] (call)".
    nid = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
    return re.sub(r"\[.*\]$", "", nid)


class Books:
    """One test's allocations: opened at its start, closed at its end."""

    def __init__(self):
        self.b = BOOKS.setdefault(node_id(), dict(peak_bytes=0, peak_line=0, leaked_bytes=0, live=0, allocations=0))
        self.sizes = {}

    def alloc(self, size):
        p = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(p), size) == 0
        self.sizes[p.value] = size
        self.b["live"] += size
        self.b["allocations"] += 1
        if self.b["live"] > self.b["peak_bytes"]:
            # The test's line that asked for the bytes reaching its peak.
            self.b["peak_bytes"], self.b["peak_line"] = self.b["live"], sys._getframe(1).f_lineno
        return p.value

    def free(self, ptr):
        assert cudart.cudaFree(ptr) == 0
        self.b["live"] -= self.sizes.pop(ptr)

    def close(self):
        # Live when the test returns: its leak (summed over parameter sets).
        self.b["leaked_bytes"] = self.b["live"]


def write_truth():
    path = os.environ.get("VRAMPROF_TRUTH")
    if path:
        out = {k: {f: v for f, v in b.items() if f != "live"} for k, b in BOOKS.items()}
        with open(path + ".tmp", "w") as f:
            json.dump({"tests": out, "module_bytes": MiB}, f, indent=1)
        os.rename(path + ".tmp", path)


atexit.register(write_truth)

# At import (collection), outside every test: no test's memory.
module_buffer = ctypes.c_void_p()
assert cudart.cudaMalloc(ctypes.byref(module_buffer), MiB) == 0


def test_small():
    books = Books()
    a = books.alloc(8 * MiB)
    b = books.alloc(4 * MiB + 512)
    books.free(a)
    books.free(b)
    books.close()


def test_leaks():
    books = Books()
    scratch = books.alloc(16 * MiB)
    books.free(scratch)
    KEPT.append(books.alloc(3 * MiB + 4096))
    books.close()


class TestModel:
    def test_big(self):
        books = Books()
        weights = books.alloc(64 * MiB)
        activations = books.alloc(32 * MiB)
        books.free(activations)
        books.free(weights)
        books.close()


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    books = Books()
    books.free(books.alloc(n * MiB))
    books.close()
