"""A trainer that runs for a while, for attach: the same function allocates
at two lines, through ctypes (libffi), the fake runtime loaded at start.

Usage: python3 train_long.py SECONDS  (FAKECUDA_LIB names the runtime)
It prints "ready" once the runtime is loaded, then allocates and frees
1 MiB (line of the else branch) and 2 MiB (the if branch) every 20 ms.
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


print("ready", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    alloc(1 << 20)
    alloc(2 << 20)
    time.sleep(0.02)
