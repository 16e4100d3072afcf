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
