"""A CPython workload on the fake CUDA runtime, loaded late through ctypes
(dlopen), the way `import torch` loads libcudart. It writes its own ground
truth to $VRAMPROF_TRUTH, in the schema of testdata/README.md ("Truth JSON";
totals and by_function only): what it asked for and what it got back.

Usage: python3 alloc.py  (FAKECUDA_LIB names the runtime to load)
"""

import ctypes
import json
import os
import sys
import time

MiB = 1 << 20


class Truth:
    def __init__(self):
        self.live = {}  # ptr -> (func, size)
        self.totals = dict(allocations=0, frees=0, failed_allocations=0, unknown_frees=0,
                           null_frees=0, zero_size_allocations=0, allocated_bytes=0,
                           peak_bytes=0, live_bytes_at_end=0)
        self.by_function = {}

    def malloc(self, func, ret, ptr, size):
        f = self.by_function.setdefault(func, dict(allocations=0, allocated_bytes=0,
                                                   live_bytes_at_end=0, live_bytes_at_peak=0,
                                                   failed_allocations=0))
        if ret != 0:
            self.totals["failed_allocations"] += 1
            f["failed_allocations"] += 1
            return
        self.totals["allocations"] += 1
        self.totals["allocated_bytes"] += size
        f["allocations"] += 1
        f["allocated_bytes"] += size
        self.live[ptr] = (func, size)
        live = sum(s for _, s in self.live.values())
        if live > self.totals["peak_bytes"]:
            self.totals["peak_bytes"] = live
            for g in self.by_function.values():
                g["live_bytes_at_peak"] = 0
            for fn, s in self.live.values():
                self.by_function[fn]["live_bytes_at_peak"] += s

    def free(self, ptr):
        if ptr in self.live:
            del self.live[ptr]
            self.totals["frees"] += 1

    def write(self):
        path = os.environ.get("VRAMPROF_TRUTH")
        if not path:
            return
        for fn, s in self.live.values():
            self.by_function[fn]["live_bytes_at_end"] += s
        self.totals["live_bytes_at_end"] = sum(s for _, s in self.live.values())
        with open(path + ".tmp", "w") as f:
            json.dump(dict(scenario="python_ctypes", pid=os.getpid(), totals=self.totals,
                           by_function=self.by_function, calls=[]), f)
        os.rename(path + ".tmp", path)


def main():
    time.sleep(0.1)  # the runtime arrives well after start-up, as with torch
    cudart = ctypes.CDLL(os.environ["FAKECUDA_LIB"])
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaFree.argtypes = [ctypes.c_void_p]
    truth = Truth()

    def alloc(func, size):
        p = ctypes.c_void_p()
        ret = cudart.cudaMalloc(ctypes.byref(p), size)
        truth.malloc(func, ret, p.value, size)
        return p.value

    def free(ptr):
        cudart.cudaFree(ptr)
        truth.free(ptr)

    weights = [alloc("load_weights", (i + 1) * 4 * MiB) for i in range(3)]
    for step in range(20):
        acts = [alloc("forward", 2 * MiB + step * 512) for _ in range(4)]
        for a in acts:
            free(a)
    free(weights[0])
    truth.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
