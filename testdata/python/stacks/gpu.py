"""The CUDA runtime seen from Python: cudaMalloc and cudaFree through ctypes,
each call written down with the Python stack that made it (the ground truth
of the Python stacks test). The stack is read on the line of the call itself,
so every frame's line is the line executing at the cudaMalloc."""

import ctypes
import os
import sys
import threading

_lib = None
_lock = threading.Lock()
calls = []  # one dict per cudaMalloc, in each thread's order


def load():
    global _lib
    _lib = ctypes.CDLL(os.environ["FAKECUDA_LIB"])
    _lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    _lib.cudaFree.argtypes = [ctypes.c_void_p]


def _stack(frame):
    out = []
    while frame is not None:
        code = frame.f_code
        out.append(dict(function=getattr(code, "co_qualname", code.co_name),
                        file=code.co_filename, line=frame.f_lineno))
        frame = frame.f_back
    return out


def malloc(size):
    p = ctypes.c_void_p()
    ret = _lib.cudaMalloc(ctypes.byref(p), size); stack = _stack(sys._getframe(0))  # noqa: E702
    with _lock:
        calls.append(dict(tid=threading.get_native_id(), size=size, ret=ret, ptr=p.value or 0, stack=stack))
    return p.value


def free(ptr):
    _lib.cudaFree(ptr)
