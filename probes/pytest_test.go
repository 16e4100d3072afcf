//go:build linux

package probes

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

// pytestPhases does what pytest does around a test, without pytest: it
// sets PYTEST_CURRENT_TEST through os.environ before each phase and
// removes it after the teardown, and allocates in between through the
// fake CUDA runtime: 1 MiB before the test, 2 MiB in its setup (freed in
// its teardown), 3 MiB in its call (freed there), 4 MiB after it. Other
// variables, and a name that only starts like pytest's, are set too.
const pytestPhases = `
import ctypes, os
rt = ctypes.CDLL(os.environ["FAKECUDA_LIB"])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
def alloc(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n << 20) == 0
    return p.value
def free(p):
    assert rt.cudaFree(p) == 0
alloc(1)
os.environ["PYTEST_CURRENT_TEST_X"] = "not pytest's"
os.environ["PYTEST_CURRENT_TEST"] = "t.py::test_a[1-x y] (setup)"
fixture = alloc(2)
os.environ["PYTEST_CURRENT_TEST"] = "t.py::test_a[1-x y] (call)"
free(alloc(3))
os.environ["PYTEST_CURRENT_TEST"] = "t.py::test_a[1-x y] (teardown)"
free(fixture)
os.environ.pop("PYTEST_CURRENT_TEST")
os.environ["OTHER"] = "1"
del os.environ["PYTEST_CURRENT_TEST_X"]
alloc(4)
`

// TestPytestPhases: a CPython's setenv and unsetenv of PYTEST_CURRENT_TEST
// come out as TestPhase records, exactly the four pytest's protocol makes
// (no other variable), each in the stream between the events made before
// and after it (the script's own order).
func TestPytestPhases(t *testing.T) {
	probetest.RequirePrivilege(t)
	sink, code := runProgram(t, []string{"/usr/bin/python3", "-c", pytestPhases},
		"FAKECUDA_LIB="+probetest.Lib(t, "libcudart.so.12"))
	require.Equal(t, 0, code)

	// The script's allocations and frees at the runtime's level, in
	// stream order, with the phases where they came.
	var seq []string
	next := 0
	phase := func(upTo int) {
		for ; next < len(sink.phases) && sink.phaseAt[next] <= upTo; next++ {
			p := sink.phases[next]
			seq = append(seq, fmt.Sprintf("phase %q %q", p.NodeID, p.Phase))
		}
	}
	sizes := map[uint64]uint64{}
	for i, e := range sink.events {
		phase(i)
		if e.API != event.APICudaMalloc && e.API != event.APICudaFree {
			continue
		}
		switch e.Kind {
		case event.KindAlloc:
			sizes[e.Addr] = e.Size
			seq = append(seq, fmt.Sprintf("alloc %d MiB", e.Size>>20))
		case event.KindFree:
			seq = append(seq, fmt.Sprintf("free %d MiB", sizes[e.Addr]>>20))
		}
	}
	phase(len(sink.events))
	assert.Equal(t, []string{
		"alloc 1 MiB",
		`phase "t.py::test_a[1-x y]" "setup"`,
		"alloc 2 MiB",
		`phase "t.py::test_a[1-x y]" "call"`,
		"alloc 3 MiB", "free 3 MiB",
		`phase "t.py::test_a[1-x y]" "teardown"`,
		"free 2 MiB",
		`phase "" ""`,
		"alloc 4 MiB",
	}, seq)
	for _, p := range sink.phases {
		assert.Equal(t, sink.procs[0].PID, p.PID, "the python's")
		assert.Equal(t, p.PID, p.TID, "its main thread's")
	}
}
