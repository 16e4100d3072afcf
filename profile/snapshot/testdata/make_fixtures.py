#!/usr/bin/env python3
"""Write the PyTorch memory snapshot fixtures of profile/snapshot.

Plain dicts and lists pickled with Python's pickle module, as
torch.cuda.memory._dump_snapshot does (pickle.dump with the default
protocol). Usage: make_fixtures.py OUTDIR. Deterministic: the same bytes
every run.

The scenario (device 0; MiB = 2**20, KiB = 2**10):
  before the trace began: segment A (small, 2 MiB at 0x7f0000000000) with
  blocks p0 (A+0, 512 KiB) and q (A+1536 KiB, 512 KiB).
  trace (time_us):
    1000 segment_alloc B (large, 20 MiB at 0x7f0000200000)
    1010 alloc b1 B+0 8 MiB          1020 alloc b2 B+8MiB 4 MiB
    1030 alloc b3 A+512KiB 1 MiB     1040/1050 free_requested/free_completed b1
    1060/1070 free q (never allocated in the trace)
    1080 alloc b4 B+0 6 MiB          1090 alloc b5 A+1536KiB 256 KiB
    1100 free_completed b5 (no free_requested)
    1110 oom 32 MiB (device_free 1 MiB)
    1120/1130 free b2                1140 free_requested b3 (still pending)
    1150 snapshot
  device 1: 1200 segment_alloc C (2 MiB at 0x7f1000000000), 1210 segment_free C.
  at the snapshot: A = [p0 active_allocated, b3 active_pending_free,
  512 KiB inactive], B = [b4 active_allocated, 14 MiB inactive].
The older generation (current_old.pickle) has the same end state with
per-block history and no device_traces.
"""
import os
import pickle
import sys

KiB, MiB = 1 << 10, 1 << 20
A, B, C = 0x7F0000000000, 0x7F0000200000, 0x7F1000000000
STREAM = 0


def frames(fn, line):
    return [
        {"filename": "train.py", "line": line, "name": fn},
        {"filename": "train.py", "line": 100, "name": "main"},
        {"filename": "train.py", "line": 120, "name": "<module>"},
    ]


def ev(action, t, addr, size, fr=None):
    e = {"action": action, "addr": addr, "size": size, "stream": STREAM,
         "time_us": t, "frames": fr or []}
    if action == "oom":
        del e["addr"]
        e["device_free"] = addr
    return e


def block(addr, size, state, fr):
    return {"address": addr, "size": size, "requested_size": size,
            "state": state, "frames": fr}


def segment(addr, size, kind, blocks, fr):
    alloc = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    return {"device": 0, "address": addr, "total_size": size,
            "allocated_size": alloc, "active_size": active,
            "requested_size": active, "stream": STREAM,
            "segment_type": kind, "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": fr, "blocks": blocks}


def current():
    trace0 = [
        ev("segment_alloc", 1000, B, 20 * MiB, frames("forward", 10)),
        ev("alloc", 1010, B, 8 * MiB, frames("forward", 11)),
        ev("alloc", 1020, B + 8 * MiB, 4 * MiB, frames("forward", 12)),
        ev("alloc", 1030, A + 512 * KiB, 1 * MiB, frames("backward", 20)),
        ev("free_requested", 1040, B, 8 * MiB, frames("forward", 13)),
        ev("free_completed", 1050, B, 8 * MiB, frames("forward", 13)),
        ev("free_requested", 1060, A + 1536 * KiB, 512 * KiB),
        ev("free_completed", 1070, A + 1536 * KiB, 512 * KiB),
        ev("alloc", 1080, B, 6 * MiB, frames("optimizer_step", 30)),
        ev("alloc", 1090, A + 1536 * KiB, 256 * KiB, frames("backward", 21)),
        ev("free_completed", 1100, A + 1536 * KiB, 256 * KiB),
        ev("oom", 1110, 1 * MiB, 32 * MiB, frames("forward", 14)),
        ev("free_requested", 1120, B + 8 * MiB, 4 * MiB),
        ev("free_completed", 1130, B + 8 * MiB, 4 * MiB),
        ev("free_requested", 1140, A + 512 * KiB, 1 * MiB),
        ev("snapshot", 1150, 0, 0),
    ]
    trace1 = [
        ev("segment_alloc", 1200, C, 2 * MiB, frames("shard", 40)),
        ev("segment_free", 1210, C, 2 * MiB, frames("shard", 41)),
    ]
    segs = [
        segment(A, 2 * MiB, "small", [
            block(A, 512 * KiB, "active_allocated", frames("load_weights", 5)),
            block(A + 512 * KiB, 1 * MiB, "active_pending_free", frames("backward", 20)),
            block(A + 1536 * KiB, 512 * KiB, "inactive", []),
        ], frames("load_weights", 5)),
        segment(B, 20 * MiB, "large", [
            block(B, 6 * MiB, "active_allocated", frames("optimizer_step", 30)),
            block(B + 6 * MiB, 14 * MiB, "inactive", []),
        ], frames("forward", 10)),
    ]
    return {"segments": segs, "device_traces": [trace0, trace1],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "",
                                   "expandable_segments": False}}


def older():
    snap = current()
    del snap["device_traces"], snap["allocator_settings"]
    for seg in snap["segments"]:
        del seg["is_expandable"], seg["segment_pool_id"], seg["frames"]
        for b in seg["blocks"]:
            fr = b.pop("frames")
            del b["address"]
            b["history"] = ([{"addr": 0, "real_size": b["size"], "frames": fr}]
                            if b["state"] != "inactive" else [])
    return snap


class Evil:
    """Pickles as a call of os.system; never unpickled by the tests."""

    def __reduce__(self):
        return (os.system, ("echo vramprof-pwned",))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    # protocol 4: the default of the Pythons PyTorch supports, what
    # _dump_snapshot writes (frames, memo, short strings).
    with open(os.path.join(out, "current.pickle"), "wb") as f:
        pickle.dump(current(), f, protocol=4)
    with open(os.path.join(out, "older.pickle"), "wb") as f:
        pickle.dump(older(), f, protocol=2)
    with open(os.path.join(out, "evil.pickle"), "wb") as f:
        pickle.dump({"segments": [], "x": Evil()}, f, protocol=4)


if __name__ == "__main__":
    main()
