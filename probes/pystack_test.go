//go:build linux

package probes

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vramprof/vramprof/probes/event"
)

func TestMergeStacks(t *testing.T) {
	nat := func(name string) event.Frame { return event.Frame{Addr: 0x1000, Mapping: 1, Function: name} }
	py := func(name string, line int64) event.Frame {
		return event.Frame{Function: name, File: "t.py", Line: line}
	}
	garbage := event.Frame{Addr: 0x7ffd0000}
	eval := nat(evalFunction)

	for _, tc := range []struct {
		name   string
		native []event.Frame
		segs   [][]event.Frame
		want   []event.Frame
	}{{
		name:   "no python frames: the native stack as it is",
		native: []event.Frame{nat("cudaMalloc"), garbage},
		want:   []event.Frame{nat("cudaMalloc"), garbage},
	}, {
		name: "each evaluation loop frame stands for one entry's frames",
		native: []event.Frame{nat("cudaMalloc"), nat("ffi_call"), eval, nat("PyObject_Call"), nat("builtin_map"),
			eval, nat("Py_RunMain"), nat("main")},
		segs: [][]event.Frame{{py("alloc", 3), py("forward", 9)}, {py("<module>", 20)}},
		want: []event.Frame{nat("cudaMalloc"), nat("ffi_call"), py("alloc", 3), py("forward", 9), nat("PyObject_Call"),
			nat("builtin_map"), py("<module>", 20), nat("Py_RunMain"), nat("main")},
	}, {
		name:   "a broken native chain: python above the last real frame",
		native: []event.Frame{nat("cudaMalloc"), nat("ffi_call_unix64"), garbage, nat("looks_real")},
		segs:   [][]event.Frame{{py("alloc", 3)}, {py("main", 7)}},
		want:   []event.Frame{nat("cudaMalloc"), nat("ffi_call_unix64"), py("alloc", 3), py("main", 7)},
	}, {
		// The native walk of a CPython 3.11 built with frame pointers
		// (testdata/python/fp/build.sh) through interleave.py's nested():
		// Python -> C -> Python -> C -> Python -> C -> cudaMalloc. The
		// frames around each loop (_PyEval_Vector, the calls into C) stay.
		name: "python 3.11 with frame pointers: three entries through a C extension",
		native: []event.Frame{nat("cudaMalloc"), nat("vpext_alloc"), nat("cfunction_vectorcall_O"), nat("PyObject_Vectorcall"),
			eval, nat("_PyEval_Vector"), nat("vpext_call"), nat("cfunction_call"), nat("_PyObject_MakeTpCall"),
			eval, nat("_PyEval_Vector"), nat("vpext_call"), nat("cfunction_call"), nat("_PyObject_MakeTpCall"),
			eval, nat("_PyEval_Vector"), nat("PyEval_EvalCode"), nat("Py_RunMain"), nat("Py_BytesMain"), garbage},
		segs: [][]event.Frame{{py("inner", 57), py("middle", 62)}, {py("outer", 68)}, {py("nested", 76), py("main", 87), py("<module>", 105)}},
		want: []event.Frame{nat("cudaMalloc"), nat("vpext_alloc"), nat("cfunction_vectorcall_O"), nat("PyObject_Vectorcall"),
			py("inner", 57), py("middle", 62), nat("_PyEval_Vector"), nat("vpext_call"), nat("cfunction_call"), nat("_PyObject_MakeTpCall"),
			py("outer", 68), nat("_PyEval_Vector"), nat("vpext_call"), nat("cfunction_call"), nat("_PyObject_MakeTpCall"),
			py("nested", 76), py("main", 87), py("<module>", 105), nat("_PyEval_Vector"), nat("PyEval_EvalCode"),
			nat("Py_RunMain"), nat("Py_BytesMain"), garbage},
	}, {
		// GCC's hot/cold split: a call from the loop's cold part returns
		// into "_PyEval_EvalFrameDefault.cold"; a clone is the loop too.
		// A name that only starts like it is another function.
		name: "the evaluation loop's cold part and clones are evaluation frames",
		native: []event.Frame{nat("cudaMalloc"), nat(evalFunction + ".cold"), nat("PyObject_Call"),
			nat(evalFunction + ".constprop.0"), nat(evalFunction + "Hook"), eval, nat("main")},
		segs: [][]event.Frame{{py("alloc", 3)}, {py("forward", 9)}, {py("<module>", 20)}},
		want: []event.Frame{nat("cudaMalloc"), py("alloc", 3), nat("PyObject_Call"), py("forward", 9),
			nat(evalFunction + "Hook"), py("<module>", 20), nat("main")},
	}, {
		name:   "more evaluation frames than entries keep the rest native",
		native: []event.Frame{nat("cudaMalloc"), eval, eval},
		segs:   [][]event.Frame{{py("alloc", 3)}},
		want:   []event.Frame{nat("cudaMalloc"), py("alloc", 3), eval},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, mergeStacks(tc.native, tc.segs))
		})
	}
}
