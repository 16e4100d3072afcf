"""bench_pairs for CPython: cudaMalloc+cudaFree pairs through ctypes, made
DEPTH Python frames deep (a trainer's stacks are tens of frames deep), timed
by the script itself. The output matches testdata/scenarios/bench_pairs.c:
"ns_per_pair X". With the same 100 warm-up pairs first.

Usage: python3 bench_pairs.py N [DEPTH]   (FAKECUDA_LIB names the runtime)"""

import ctypes
import os
import sys
import time


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    depth = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    if n <= 0 or depth < 1:
        print("usage: bench_pairs.py N [DEPTH] (N > 0, DEPTH >= 1)", file=sys.stderr)
        return 2
    lib = ctypes.CDLL(os.environ["FAKECUDA_LIB"])
    lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.cudaFree.argtypes = [ctypes.c_void_p]
    p = ctypes.c_void_p()
    ref = ctypes.byref(p)

    def pairs(count):
        for _ in range(count):
            if lib.cudaMalloc(ref, 1 << 20) != 0 or lib.cudaFree(p) != 0:
                raise SystemExit(1)

    def nest(level, count):
        if level > 1:
            return nest(level - 1, count)
        return pairs(count)

    nest(depth - 1, 100)
    t0 = time.perf_counter_ns()
    nest(depth - 1, n)
    t1 = time.perf_counter_ns()
    print(f"ns_per_pair {(t1 - t0) / n:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
