"""Ground truth for probes/python's tests (probes/python/resolve_test.go):
what CPython itself says about its code objects and live frames, for the
test to compare package python's Resolver with.

Usage:
  python stacks.py          print one JSON line about the frames of a call
                            chain through two modules, then wait for a line
                            on stdin (the test reads the process meanwhile)
  python stacks.py tables [MODULE...]
                            print one JSON line with the line tables of
                            these modules' code objects (and this script's
                            own), each with co_lines()

Nothing here depends on package python: a frame's instruction position
is Python's frame.f_lasti (bytes), its line frame.f_lineno; the test turns
f_lasti into the raw value the walker reads with offsets compiled from the
interpreter's headers.
"""

import ctypes
import importlib
import json
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import stacks_mod  # noqa: E402


def name_of(code):
    # What the Resolver must show: co_qualname where the version has it.
    return getattr(code, "co_qualname", code.co_name)


def describe_code(code):
    return dict(id=id(code), name=name_of(code), co_name=code.co_name,
                filename=code.co_filename, firstlineno=code.co_firstlineno)


def runtime_addr():
    return ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))


def mapped_file(addr):
    # The file whose mapping holds addr, from the kernel's own account.
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= addr < end and len(fields) == 6:
                return fields[5].strip()
    return ""


def pause(x):
    # The callers' frames stay put while this one waits: record them.
    frames = []
    f = sys._getframe(1)
    while f is not None:
        d = describe_code(f.f_code)
        d.update(code=id(f.f_code), lasti=f.f_lasti, lineno=f.f_lineno)
        frames.append(d)
        f = f.f_back
    codes = [stacks_mod.größe, stacks_mod.Klasse.methode, stacks_mod.функция,
             stacks_mod.𠀀, stacks_mod.decorated, stacks_mod.long_function,
             stacks_mod.loop_back, Outer.method, Outer.Inner.deep, top_level, pause]
    out = dict(
        pid=os.getpid(),
        version=list(sys.version_info[:3]),
        executable=sys.executable,
        runtime_addr=runtime_addr(),
        runtime_file=mapped_file(runtime_addr()),
        frames=frames,
        functions=[describe_code(f.__code__) for f in codes],
        not_code=[id(x), id("a string"), id(Outer)],
    )
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
    return 0


class Outer:
    class Inner:
        def deep(self):
            return stacks_mod.größe(pause)

    def method(self):
        return self.Inner().deep()


def top_level():
    return Outer().method()


def all_code(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from all_code(c)


def tables(modules):
    out = []
    for m in [stacks_mod] + [importlib.import_module(n) for n in modules]:
        with open(m.__file__, "rb") as src:
            module_code = compile(src.read(), m.__file__, "exec")
        for c in all_code(module_code):
            out.append(dict(
                name=name_of(c), firstlineno=c.co_firstlineno,
                linetable=c.co_linetable.hex(), code_bytes=len(c.co_code),
                lines=[[s, e, -1 if line is None else line] for s, e, line in c.co_lines()],
            ))
    print(json.dumps(dict(version=list(sys.version_info[:3]), code=out)))


if __name__ == "__main__":
    if sys.argv[1:2] == ["tables"]:
        tables(sys.argv[2:])
    else:
        top_level()
