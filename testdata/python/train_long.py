"""A trainer that runs for a while, for attach: the same function allocates
at two lines, through ctypes (libffi), the fake runtime loaded at start.

Usage: python3 train_long.py SECONDS [go]  (FAKECUDA_LIB names the runtime)
It prints "ready" once the runtime is loaded, then allocates and frees
1 MiB (line of the else branch) and 2 MiB (the if branch) every 20 ms, for
SECONDS; with "go", the SECONDS count from a line read on stdin (sent once
an attach is live, however long attaching took), and it allocates meanwhile.
"""

import ctypes
import os
import sys
import time

lib = ctypes.CDLL(os.environ["FAKECUDA_LIB"])


def alloc(n):
    p = ctypes.c_void_p()
    if n > (1 << 20):
        lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))
    else:
        lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))
    lib.cudaFree(p)


def step():
    alloc(1 << 20)
    alloc(2 << 20)
    time.sleep(0.02)


print("ready", flush=True)
went = None
if len(sys.argv) > 2 and sys.argv[2] == "go":
    import threading

    went = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), went.set()), daemon=True).start()
end = None
while end is None or time.time() < end:
    if end is None and (went is None or went.is_set()):
        end = time.time() + float(sys.argv[1])
    step()  # one line: the same stacks before and after "go"
