"""Python and C frames interleaved on one stack, for the test that checks
where vramprof puts the Python frames among the native ones
(cmd/vramprof/python_interleave_e2e_test.go).

vpext (vpext.c) calls cudaMalloc from C and calls Python back from C, so an
allocation's stack passes from Python to C and back, zero, one or two times:

  direct:  <module> -> main -> direct -> vpext.alloc -> cudaMalloc
  once:    <module> -> main -> outer -> vpext.call -> middle -> inner
               -> vpext.alloc -> cudaMalloc
  twice:   <module> -> main -> nested -> vpext.call -> outer -> vpext.call
               -> middle -> inner -> vpext.alloc -> cudaMalloc

Each C-to-Python entry (the interpreter's start, each vpext.call) runs one
evaluation loop on the native stack, which evaluates the frames from the
entry's function up to the next entry: those are one segment. For every
cudaMalloc the script writes to $VRAMPROF_TRUTH the Python stack as the
interpreter sees it, innermost first (co_qualname, file, f_lineno, read on
the line of the call), cut into those segments, innermost first.

Usage: python3.11 interleave.py   (vpext on PYTHONPATH)"""

import json
import os
import sys
import time

import vpext

MiB = 1 << 20

calls = []  # one dict per cudaMalloc, in order
_c_callers = []  # the frames now calling vpext.call, outermost first


def _segments(frame):
    """The stack from frame down, innermost first, cut where C called into
    Python: after a frame whose caller is calling vpext.call."""
    segs, cur = [], []
    while frame is not None:
        code = frame.f_code
        cur.append(dict(function=code.co_qualname, file=code.co_filename, line=frame.f_lineno))
        if any(frame.f_back is c for c in _c_callers):
            segs.append(cur)
            cur = []
        frame = frame.f_back
    segs.append(cur)
    return segs


def record(size, segs):
    calls.append(dict(size=size, segments=segs))


def inner(size):
    ptr = vpext.alloc(size); record(size, _segments(sys._getframe(0)))  # noqa: E702
    return ptr


def middle(size):
    return inner(size)


def outer(size):
    _c_callers.append(sys._getframe(0))
    try:
        return vpext.call(middle, size)
    finally:
        _c_callers.pop()


def nested(size):
    _c_callers.append(sys._getframe(0))
    try:
        return vpext.call(outer, size)
    finally:
        _c_callers.pop()


def direct(size):
    ptr = vpext.alloc(size); record(size, _segments(sys._getframe(0)))  # noqa: E702
    return ptr


def main():
    ptrs = [direct(1 * MiB), outer(2 * MiB), nested(3 * MiB)]
    for ptr in ptrs:
        vpext.free(ptr)
    path = os.environ.get("VRAMPROF_TRUTH")
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(dict(scenario="python_interleave", pid=os.getpid(), version=list(sys.version_info[:3]),
                           executable=sys.executable, calls=calls), f)
        os.rename(path + ".tmp", path)
    # vramprof reads a new stack's code objects as soon as the call is made
    # (they have a ring buffer of their own), and the native symbols once
    # it handles the record (up to its 50 ms poll later). On a loaded
    # machine both can come after an immediate exit: stay a moment.
    time.sleep(0.3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
