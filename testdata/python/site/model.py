"""A model that calls the CUDA runtime through ctypes (libffi), for the
site test (cmd/vramprof/site_e2e_test.go): every cudaMalloc is made by a
user Python function at module level or below, with libffi, _ctypes and the
interpreter's eval loop between it and the runtime. vramprof's site for
each must be that Python function with its file:line, never an address in
libffi.

It writes its own truth to $VRAMPROF_TRUTH: each call with the function,
file and line that made it, read from the frame itself on the line of the
call, and the bytes each function had live at the peak and at the end.

Usage: python3 model.py  (FAKECUDA_LIB names the runtime to load)
"""

import ctypes
import json
import os
import sys
import time

MiB = 1 << 20

cudart = ctypes.CDLL(os.environ["FAKECUDA_LIB"])
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaFree.argtypes = [ctypes.c_void_p]
time.sleep(0.1)  # the runtime arrives, then work starts, as with torch

calls = []
live = {}  # ptr -> (function, size)
peak = [0, {}]  # bytes, function -> bytes live at the peak


def here():
    # The caller's frame, as a site names it: co_qualname (3.11+) or
    # co_name, co_filename, and the line being run.
    f = sys._getframe(1)
    return dict(function=getattr(f.f_code, "co_qualname", f.f_code.co_name),
                file=f.f_code.co_filename, line=f.f_lineno)


def record(where, ret, ptr, size):
    calls.append(dict(where, size=size, ret=ret, ptr=ptr or 0))
    if ret != 0:
        return
    live[ptr] = (where["function"], size)
    total = sum(s for _, s in live.values())
    if total > peak[0]:
        by = {}
        for fn, s in live.values():
            by[fn] = by.get(fn, 0) + s
        peak[0], peak[1] = total, by


def load_weights():
    weights = []
    for i in range(3):
        p = ctypes.c_void_p()
        ret, where = cudart.cudaMalloc(ctypes.byref(p), 32 * MiB), here()
        record(where, ret, p.value, 32 * MiB)
        weights.append(p.value)
    return weights


def cache_embeddings(step):
    p = ctypes.c_void_p()
    ret, where = cudart.cudaMalloc(ctypes.byref(p), MiB + step * 4096), here()
    record(where, ret, p.value, MiB + step * 4096)
    return p.value


weights = load_weights()
cache = []
for step in range(30):
    cache.append(cache_embeddings(step))
    # Paced, so the loop spans most of the run: the leak rule reads live
    # bytes at windows over the whole run, start-up included.
    time.sleep(0.015)
# At module level too: the site is then the module frame.
scratch = ctypes.c_void_p()
ret, where = cudart.cudaMalloc(ctypes.byref(scratch), 2 * MiB), here()
record(where, ret, scratch.value, 2 * MiB)

path = os.environ.get("VRAMPROF_TRUTH")
if path:
    end = {}
    for fn, s in live.values():
        end[fn] = end.get(fn, 0) + s
    with open(path + ".tmp", "w") as f:
        json.dump(dict(pid=os.getpid(), version=list(sys.version_info[:3]), calls=calls,
                       peak_bytes=peak[0], live_at_peak=peak[1], live_at_end=end), f)
    os.rename(path + ".tmp", path)
