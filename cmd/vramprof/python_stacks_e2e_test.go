//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

// pyStacksTruth is what testdata/python/stacks/train.py writes: every
// cudaMalloc with the Python stack that made it, innermost first, as the
// interpreter itself saw it (code names, files, f_lineno).
type pyStacksTruth struct {
	PID        uint32 `json:"pid"`
	Version    []int  `json:"version"`
	Executable string `json:"executable"`
	Calls      []struct {
		TID   uint32 `json:"tid"`
		Size  uint64 `json:"size"`
		Ret   int32  `json:"ret"`
		Ptr   uint64 `json:"ptr"`
		Stack []struct {
			Function string `json:"function"`
			File     string `json:"file"`
			Line     int64  `json:"line"`
		} `json:"stack"`
	} `json:"calls"`
}

// pyReport is the part of report.json this test reads.
type pyReport struct {
	Interpreters []struct {
		PID     uint32 `json:"pid"`
		Name    string `json:"name"`
		Version string `json:"version"`
		Path    string `json:"path"`
		Note    string `json:"note"`
	} `json:"interpreters"`
	Findings []struct {
		Kind   string        `json:"kind"`
		Stacks []ReportStack `json:"stacks"`
	} `json:"findings"`
}

// pythonFrame formats a Python frame as report.json does.
func pythonFrame(function, file string, line int64) string {
	return fmt.Sprintf("%s (%s:%d)", function, file, line)
}

// TestPythonStacks runs a Python trainer (two modules, a class, a
// generator, a coroutine, worker threads) over the fake CUDA runtime and
// compares the Python frames of every allocation's stack, in the trace,
// with the stack the script read from its own frames at that call; then
// checks that the leak and peak findings name the Python line.
func TestPythonStacks(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, py := range probetest.Pythons(t) {
		t.Run(py.Name, func(t *testing.T) {
			testPythonStacks(t, py.Argv)
		})
	}
}

func testPythonStacks(t *testing.T, python []string) {
	tmp := t.TempDir()
	truthPath := filepath.Join(tmp, "truth.json")
	dir := filepath.Join(tmp, "out")
	script := filepath.Join(probetest.Root(), "testdata", "python", "stacks", "train.py")
	args := append([]string{"run", "-o", dir, "--"}, python...)
	r := vramprof(t, execOpts{dir: tmp, env: []string{
		"VRAMPROF_TRUTH=" + truthPath,
		"FAKECUDA_LIB=" + probetest.Lib(t, "libcudart.so.12"),
	}}, append(args, script)...)
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	truth := mustReadJSON[pyStacksTruth](t, truthPath)
	require.NotEmpty(t, truth.Calls)

	byThread := allocStacks(t, filepath.Join(dir, "trace.vpt"), truth.PID)

	// 3.10 to 3.14 are supported; another version gets native stacks and
	// one line saying why.
	supported := truth.Version[0] == 3 && truth.Version[1] >= 10 && truth.Version[1] <= 14
	rep := mustReadJSON[pyReport](t, filepath.Join(dir, "report.json"))
	require.NotEmpty(t, rep.Interpreters)
	in := rep.Interpreters[0]
	assert.Equal(t, truth.PID, in.PID)
	assert.Equal(t, "CPython", in.Name)
	if !supported {
		assert.Contains(t, in.Note, fmt.Sprintf("%d.%d", truth.Version[0], truth.Version[1]), "the note names the version")
		assert.Contains(t, in.Note, "native stacks only")
	} else {
		assert.Empty(t, in.Note)
		assert.Equal(t, fmt.Sprintf("%d.%d.%d", truth.Version[0], truth.Version[1], truth.Version[2]), in.Version)
	}

	checkPythonFrames(t, truth, byThread, supported, 0)
	// The forked worker: its frames too (the interpreter carried over at
	// the fork), against its own truth.
	children, err := filepath.Glob(truthPath + ".*")
	require.NoError(t, err)
	require.Len(t, children, 1, "the forked worker's truth")
	child := mustReadJSON[pyStacksTruth](t, children[0])
	require.NotEmpty(t, child.Calls)
	checkPythonFrames(t, child, allocStacks(t, filepath.Join(dir, "trace.vpt"), child.PID), supported, 0)

	// The findings name the Python function and line that allocated: the
	// leak is Model.forward's kept 1 MiB activation, the peak crossed in
	// Model.generate_buffers (16 MiB buffers).
	lineOf := func(fn string, size uint64) string {
		if truth.Version[0] == 3 && truth.Version[1] < 11 {
			fn = fn[strings.LastIndex(fn, ".")+1:] // no co_qualname before 3.11
		}
		for _, c := range truth.Calls {
			if c.Size == size && len(c.Stack) > 1 && c.Stack[1].Function == fn {
				return pythonFrame(fn, c.Stack[1].File, c.Stack[1].Line)
			}
		}
		t.Fatalf("the truth has no %d-byte call from %s", size, fn)
		return ""
	}
	if !supported {
		checkReplay(t, dir)
		return
	}
	const MiB = 1 << 20
	kinds := map[string][]string{}
	for _, fd := range rep.Findings {
		for _, st := range fd.Stacks {
			kinds[fd.Kind] = append(kinds[fd.Kind], st.Frames...)
		}
	}
	assert.Contains(t, kinds["leak"], lineOf("Model.forward", MiB), "leak finding's stacks")
	assert.Contains(t, kinds["peak"], lineOf("Model.generate_buffers", 16*MiB), "peak finding's stacks")

	checkReplay(t, dir)
}

// tracedAllocs reads a trace's segment-layer allocations of pid (not the
// driver calls nested in them): each one's stack, in order, and the files
// of the trace's mappings.
func tracedAllocs(tb testing.TB, path string, pid uint32) ([][]event.Frame, map[event.MappingID]string) {
	stacks, files, _ := readAllocs(tb, path, pid)
	return stacks, files
}

// allocStacks is tracedAllocs per thread, in each thread's order.
func allocStacks(tb testing.TB, path string, pid uint32) map[uint32][][]event.Frame {
	stacks, _, tids := readAllocs(tb, path, pid)
	byThread := map[uint32][][]event.Frame{}
	for i, st := range stacks {
		byThread[tids[i]] = append(byThread[tids[i]], st)
	}
	return byThread
}

func readAllocs(tb testing.TB, path string, pid uint32) ([][]event.Frame, map[event.MappingID]string, []uint32) {
	tb.Helper()
	f, err := os.Open(path)
	require.NoError(tb, err)
	defer f.Close()
	rd, err := event.NewReader(f)
	require.NoError(tb, err)
	stacks := map[event.StackID][]event.Frame{}
	files := map[event.MappingID]string{}
	var out [][]event.Frame
	var tids []uint32
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(tb, err)
		switch x := rec.(type) {
		case *event.Mapping:
			files[x.ID] = x.File
		case *event.Stack:
			stacks[x.ID] = slices.Clone(x.Frames) // the reader reuses its buffers
		case *event.Event:
			if x.Kind == event.KindAlloc && x.Layer == event.LayerSegment && x.Flags&event.FlagNested == 0 && x.PID == pid {
				out = append(out, stacks[x.Stack])
				tids = append(tids, x.TID)
			}
		}
	}
	return out, files, tids
}

// checkPythonFrames compares the Python frames of each traced allocation
// with the stack the script recorded for it, thread by thread in order.
// skip is how many of the main thread's first calls were made before
// tracing began (attach): those are not in the trace.
func checkPythonFrames(t *testing.T, truth *pyStacksTruth, byThread map[uint32][][]event.Frame, supported bool, skip int) {
	seen := map[uint32]int{}
	for i, call := range truth.Calls {
		if call.TID == truth.PID && skip > 0 {
			skip--
			continue
		}
		n := seen[call.TID]
		seen[call.TID]++
		require.Less(t, n, len(byThread[call.TID]), "call %d: thread %d made more allocations than were traced", i, call.TID)
		var got, want []string
		for _, fr := range byThread[call.TID][n] {
			if fr.Addr == 0 && strings.HasSuffix(fr.File, ".py") {
				got = append(got, pythonFrame(fr.Function, fr.File, fr.Line))
			}
		}
		for _, fr := range call.Stack {
			if supported {
				want = append(want, pythonFrame(fr.Function, fr.File, fr.Line))
			}
		}
		require.Equal(t, want, got, "call %d (thread %d, %d bytes): Python frames; the stack: %+v", i, call.TID, call.Size, byThread[call.TID][n])
		// The native frames come first: cudaMalloc is the leaf.
		require.NotEmpty(t, byThread[call.TID][n], "call %d: no stack", i)
		require.Equal(t, "cudaMalloc", byThread[call.TID][n][0].Function, "call %d: %+v", i, byThread[call.TID][n])
	}
	for tid, evs := range byThread {
		assert.Equal(t, len(evs), seen[tid], "thread %d: traced allocations the script did not make", tid)
	}
}

// TestPythonStacksAttach attaches to a Python trainer that is already
// running (its model built, two allocations made) and checks the Python
// frames of everything it allocates afterwards: no restart, no change to
// the program. One interpreter with a layout table, one with
// _Py_DebugOffsets.
func TestPythonStacksAttach(t *testing.T) {
	probetest.RequirePrivilege(t)
	var picked []probetest.Python
	for _, py := range probetest.Pythons(t) {
		if py.Name == "system-3.11" || py.Version == "3.14" && !py.Shared {
			picked = append(picked, py)
		}
	}
	require.Len(t, picked, 2, "want Debian's 3.11 and a static 3.14 (testdata/python/fetch.sh)")
	script := filepath.Join(probetest.Root(), "testdata", "python", "stacks", "train.py")
	for _, py := range picked {
		t.Run(py.Name, func(t *testing.T) {
			cmd := exec.Command(py.Argv[0], append(py.Argv[1:], script)...)
			cmd.Env = append(os.Environ(), "TRAIN_WAIT_SIGNAL=1", "FAKECUDA_LIB="+probetest.Lib(t, "libcudart.so.12"))
			lr := startLongrunCmd(t, cmd)
			a := startAttach(t, lr.pid)
			require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
			require.NoError(t, <-lr.exit)
			require.Equal(t, 0, a.wait(t, 30*time.Second), "stderr:\n%s", a.stderr.String())

			truth := mustReadJSON[pyStacksTruth](t, lr.truth)
			byThread := allocStacks(t, filepath.Join(a.dir, "trace.vpt"), truth.PID)
			// Model.__init__'s two weights were allocated before the attach.
			checkPythonFrames(t, truth, byThread, true, 2)
			rep := mustReadJSON[pyReport](t, filepath.Join(a.dir, "report.json"))
			require.NotEmpty(t, rep.Interpreters)
			assert.Empty(t, rep.Interpreters[0].Note)
		})
	}
}

// TestPythonStripped: a program that looks like an interpreter (named
// python3.11) but defines no _PyRuntime is profiled as native code, exact
// as ever, and the report says in one line why there are no Python frames.
func TestPythonStripped(t *testing.T) {
	probetest.RequirePrivilege(t)
	data, err := os.ReadFile(probetest.Bin(t, "steady"))
	require.NoError(t, err)
	tmp := t.TempDir()
	fake := filepath.Join(tmp, "python3.11")
	require.NoError(t, os.WriteFile(fake, data, 0o755))
	truthPath := filepath.Join(tmp, "truth.json")
	dir := filepath.Join(tmp, "out")
	// The copy's rpath ($ORIGIN) no longer leads to the fake runtime.
	libs := filepath.Dir(probetest.Lib(t, "libcudart.so.12"))
	r := vramprof(t, execOpts{dir: tmp, env: []string{"VRAMPROF_TRUTH=" + truthPath, "LD_LIBRARY_PATH=" + libs}}, "run", "-o", dir, "--", fake)
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	truth := probetest.MustReadTruth(t, truthPath)
	rep := mustReadReport(t, filepath.Join(dir, "report.json"))
	assert.Equal(t, truth.Totals.Allocations, val(t, "allocations", rep.Totals.Allocations))
	assert.Equal(t, truth.Totals.PeakBytes, val(t, "peak_bytes", rep.Totals.PeakBytes))
	py := mustReadJSON[pyReport](t, filepath.Join(dir, "report.json"))
	require.Len(t, py.Interpreters, 1)
	assert.Equal(t, fmt.Sprintf("no Python frames in pid %d: %s defines no _PyRuntime symbol (stripped?): unsupported CPython; native stacks only", truth.PID, fake), py.Interpreters[0].Note)
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), `defines no \_PyRuntime symbol`, "one line in report.md (markdown-escaped)")
}

// TestPythonDepthAndOff: --python-depth 2 keeps the two innermost Python
// frames and marks the cut; --python off keeps the stacks native.
func TestPythonDepthAndOff(t *testing.T) {
	probetest.RequirePrivilege(t)
	const python = "/usr/bin/python3.11"
	script := filepath.Join(probetest.Root(), "testdata", "python", "stacks", "train.py")
	for _, tc := range []struct {
		name  string
		flags []string
		depth int // Python frames kept; 0: none
	}{
		{"depth-2", []string{"--python-depth", "2"}, 2},
		{"off", []string{"--python", "off"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			truthPath := filepath.Join(tmp, "truth.json")
			dir := filepath.Join(tmp, "out")
			args := append(append([]string{"run", "-o", dir}, tc.flags...), "--", python, script)
			r := vramprof(t, execOpts{dir: tmp, env: []string{
				"VRAMPROF_TRUTH=" + truthPath,
				"FAKECUDA_LIB=" + probetest.Lib(t, "libcudart.so.12"),
			}}, args...)
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			truth := mustReadJSON[pyStacksTruth](t, truthPath)
			byThread := allocStacks(t, filepath.Join(dir, "trace.vpt"), truth.PID)
			seen := map[uint32]int{}
			for i, call := range truth.Calls {
				n := seen[call.TID]
				seen[call.TID]++
				require.Less(t, n, len(byThread[call.TID]))
				var got, want []string
				for _, fr := range byThread[call.TID][n] {
					if fr.Addr == 0 && (strings.HasSuffix(fr.File, ".py") || strings.HasPrefix(fr.Function, "<python")) {
						got = append(got, pythonFrame(fr.Function, fr.File, fr.Line))
					}
				}
				for k, fr := range call.Stack {
					if k == tc.depth {
						want = append(want, pythonFrame("<python frames past the depth limit>", "", 0))
						break
					}
					want = append(want, pythonFrame(fr.Function, fr.File, fr.Line))
				}
				if tc.depth == 0 {
					want = nil
				}
				require.Equal(t, want, got, "call %d", i)
			}
			rep := mustReadJSON[pyReport](t, filepath.Join(dir, "report.json"))
			if tc.depth == 0 {
				assert.Empty(t, rep.Interpreters, "--python off: no interpreter looked for")
			} else {
				assert.NotEmpty(t, rep.Interpreters)
			}
		})
	}
}
