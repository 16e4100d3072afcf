"""Each pytest test's own books of the GPU memory it allocates, for
test_gpu.py, test_pool.py and test_flight.py (cmd/vramprof's per-test e2e
tests): the allocations it made and their bytes, the bytes it still has live, the most it had live at once and the line
that reached it, and what it left live when its last code ran. At exit they
are written to $VRAMPROF_TRUTH, keyed by the node id pytest itself gives the
test, its parameter set included (PYTEST_CURRENT_TEST).

A fixture's allocations are the test's it runs for: Books opened in a
fixture's setup or teardown book to the test pytest runs then (pytest sets
PYTEST_CURRENT_TEST for setup and teardown too). A fixture that frees in
its teardown closes its books after that: a test's leak is what is live
when its last code, its teardown's, ran.
"""

import atexit
import ctypes
import json
import os
import sys

MiB = 1 << 20

BOOKS = {}  # node id -> {"peak_bytes", "peak_line", "leaked_bytes", "live", "allocations", "allocated_bytes"}


def node_id():
    # pytest's own name of the running test: "path::[Class::]name[param] (call)".
    return os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]


def cuda_runtime():
    """The fake CUDA runtime's cudaMalloc and cudaFree, as alloc and free."""
    cudart = ctypes.CDLL(os.environ["FAKECUDA_LIB"])
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaFree.argtypes = [ctypes.c_void_p]

    def alloc(size):
        p = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(p), size) == 0
        return p.value

    def free(ptr):
        assert cudart.cudaFree(ptr) == 0

    return alloc, free


def caching_allocator():
    """The fake PyTorch caching allocator's c10_alloc and c10_free (device
    0, the default stream), as alloc and free."""
    c10 = ctypes.CDLL(os.environ["C10_LIB"])
    c10.c10_alloc.restype = ctypes.c_void_p
    c10.c10_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    c10.c10_free.argtypes = [ctypes.c_void_p]

    def alloc(size):
        p = c10.c10_alloc(size, 0, None)
        assert p
        return p

    def free(ptr):
        assert c10.c10_free(ptr) == 0

    return alloc, free


class Books:
    """One test's allocations through alloc and free: opened at its start,
    closed at its end."""

    def __init__(self, alloc, free):
        self.b = BOOKS.setdefault(node_id(), dict(peak_bytes=0, peak_line=0, leaked_bytes=0, live=0, allocations=0,
                                                     allocated_bytes=0))
        self._alloc, self._free = alloc, free
        self.sizes = {}

    def alloc(self, size):
        ptr = self._alloc(size)
        self.sizes[ptr] = size
        self.b["live"] += size
        self.b["allocations"] += 1
        self.b["allocated_bytes"] += size
        if self.b["live"] > self.b["peak_bytes"]:
            # The test's line that asked for the bytes reaching its peak.
            self.b["peak_bytes"], self.b["peak_line"] = self.b["live"], sys._getframe(1).f_lineno
        return ptr

    def free(self, ptr):
        self._free(ptr)
        self.b["live"] -= self.sizes.pop(ptr)

    def close(self):
        # Live when the test's code ran last: its leak. The last close
        # counts (a fixture's teardown closes after the test did).
        self.b["leaked_bytes"] = self.b["live"]


def write_truth():
    path = os.environ.get("VRAMPROF_TRUTH")
    if path:
        out = {k: {f: v for f, v in b.items() if f != "live"} for k, b in BOOKS.items()}
        with open(path + ".tmp", "w") as f:
            json.dump({"tests": out}, f, indent=1)
        os.rename(path + ".tmp", path)


atexit.register(write_truth)
