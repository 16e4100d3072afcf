//go:build linux

package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

// interleaveTruth is what testdata/python/fp/interleave.py writes: every
// cudaMalloc with its Python stack, innermost first, cut into the segments
// one C-to-Python entry each evaluates, innermost first.
type interleaveTruth struct {
	PID     uint32 `json:"pid"`
	Version []int  `json:"version"`
	Calls   []struct {
		Size     uint64 `json:"size"`
		Segments [][]struct {
			Function string `json:"function"`
			File     string `json:"file"`
			Line     int64  `json:"line"`
		} `json:"segments"`
	} `json:"calls"`
}

// The native frames the test expects by name, from testdata/python/fp/vpext.c
// and the fake runtime: the extension's functions are static, named in
// .symtab.
const (
	allocFunction = "vpext_alloc" // calls cudaMalloc
	callFunction  = "vpext_call"  // calls Python back, through PyObject_Call
	// evalLoop is CPython's evaluation loop (Python/ceval.c): one native
	// frame per C-to-Python entry (GCC may name a part of it apart:
	// "_PyEval_EvalFrameDefault.cold").
	evalLoop = "_PyEval_EvalFrameDefault"
	// bytesMain is the outermost function of the interpreter's own that
	// the walk sees: the interpreter's main (Programs/python.c) only
	// returns Py_BytesMain(argc, argv), a sibling call at -O2 (jmp), so
	// main is no frame; below Py_BytesMain is libc.
	bytesMain = "Py_BytesMain"
)

// TestPythonInterleave runs a Python script whose allocations pass from
// Python to C and back (through a C extension's callback) zero, one and two
// times, under a CPython 3.11 built with frame pointers (so the native walk
// reaches every evaluation loop), and checks that each merged stack is the
// native stack with every evaluation-loop frame replaced by exactly the
// Python frames its entry evaluates: cudaMalloc, vpext_alloc, the innermost
// segment, native frames through vpext_call, the next segment, ..., native
// frames down to the interpreter's Py_BytesMain.
func TestPythonInterleave(t *testing.T) {
	probetest.RequirePrivilege(t)
	python := fpPython(t)
	tmp := t.TempDir()
	buildVPExt(t, python, tmp)
	script := filepath.Join(probetest.Root(), "testdata", "python", "fp", "interleave.py")

	// run traces the script, with vramprof's extra arguments, and returns
	// its truth and the stacks of its allocations in order.
	run := func(name string, extra ...string) (*interleaveTruth, [][]event.Frame, map[event.MappingID]string) {
		truthPath := filepath.Join(tmp, name+"-truth.json")
		dir := filepath.Join(tmp, name)
		args := append(append([]string{"run", "-o", dir}, extra...), "--", python, script)
		r := vramprof(t, execOpts{dir: tmp, env: []string{
			"VRAMPROF_TRUTH=" + truthPath,
			"PYTHONPATH=" + tmp,
		}}, args...)
		require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
		truth := mustReadJSON[interleaveTruth](t, truthPath)
		require.Len(t, truth.Calls, 3, "the script makes three allocations")
		stacks, files := tracedAllocs(t, filepath.Join(dir, "trace.vpt"), truth.PID)
		return truth, stacks, files
	}
	truth, merged, files := run("merged")
	require.Equal(t, []int{3, 11}, truth.Version[:2])
	_, native, _ := run("native", "--python", "off")
	require.Len(t, merged, len(truth.Calls), "traced allocations")
	require.Len(t, native, len(truth.Calls), "traced allocations without Python frames")

	for i, call := range truth.Calls {
		t.Run(fmt.Sprintf("%d-MiB-%d-entries", call.Size>>20, len(call.Segments)), func(t *testing.T) {
			stack := merged[i]
			t.Logf("merged stack of the %d-byte cudaMalloc:\n%s", call.Size, formatStack(stack, files))
			var want [][]string
			for _, seg := range call.Segments {
				var fs []string
				for _, fr := range seg {
					fs = append(fs, pythonFrame(fr.Function, fr.File, fr.Line))
				}
				want = append(want, fs)
			}

			// The stack alternates: native, segment, native, ...,
			// segment, native.
			var runs [][]event.Frame
			for j, fr := range stack {
				if j == 0 || isPython(fr) != isPython(stack[j-1]) {
					runs = append(runs, nil)
				}
				runs[len(runs)-1] = append(runs[len(runs)-1], fr)
			}
			require.Len(t, runs, 2*len(want)+1, "native and Python runs")
			var got [][]string
			for k := 1; k < len(runs); k += 2 {
				var fs []string
				for _, fr := range runs[k] {
					fs = append(fs, pythonFrame(fr.Function, fr.File, fr.Line))
				}
				got = append(got, fs)
			}
			require.Equal(t, want, got, "the Python segments, innermost first")

			// The leaf run: cudaMalloc, called by the extension's alloc.
			leaf := names(runs[0])
			require.GreaterOrEqual(t, len(leaf), 2, "frames below the innermost segment")
			assert.Equal(t, []string{"cudaMalloc", allocFunction}, leaf[:2], "the leaf frames")
			assert.NotContains(t, leaf[2:], callFunction, "below the innermost segment")
			// Between two segments: C called Python back, once, through
			// vpext.call.
			for k := 2; k < len(runs)-1; k += 2 {
				between := names(runs[k])
				n := 0
				for _, f := range between {
					if f == callFunction {
						n++
					}
				}
				assert.Equal(t, 1, n, "%s between segments %d and %d: %q", callFunction, k/2, k/2+1, between)
				assert.NotContains(t, between, allocFunction)
			}
			// Below the outermost segment: the interpreter's start, down
			// to Py_BytesMain, and no extension frame.
			root := names(runs[len(runs)-1])
			assert.NotContains(t, root, callFunction, "below the outermost segment")
			assert.NotContains(t, root, allocFunction, "below the outermost segment")
			assert.Contains(t, root, bytesMain, "below the outermost segment")
			for _, fr := range stack {
				assert.False(t, strings.HasPrefix(fr.Function, evalLoop), "an evaluation loop left native: %s", fr.Function)
			}

			// Where the evaluation loops were: the same run without
			// Python frames, each evaluation-loop frame replaced by one
			// segment, is the merged stack's native frames.
			nat := names(native[i])
			t.Logf("native stack of the same call (--python off): %q", nat)
			var expect []string
			k := 0
			for _, f := range nat {
				if strings.HasPrefix(f, evalLoop) && k < len(want) {
					expect = append(expect, "<segment>")
					k++
					continue
				}
				expect = append(expect, f)
			}
			require.Equal(t, len(want), k, "evaluation-loop frames in the native stack: %q", nat)
			var gotShape []string
			for j, r := range runs {
				if j%2 == 1 {
					gotShape = append(gotShape, "<segment>")
					continue
				}
				gotShape = append(gotShape, names(r)...)
			}
			assert.Equal(t, expect, gotShape, "the merged stack is the native one, each evaluation loop replaced by its segment")
		})
	}
}

// isPython tells a Python frame of a merged stack from a native one: a
// code object has no code address.
func isPython(f event.Frame) bool { return f.Addr == 0 }

func names(frames []event.Frame) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = f.Function
	}
	return out
}

// formatStack prints a stack leaf first, one frame a line, Python frames
// marked; an unnamed native frame by its address and mapped file.
func formatStack(frames []event.Frame, files map[event.MappingID]string) string {
	var b strings.Builder
	for i, f := range frames {
		kind := "native"
		if isPython(f) {
			kind = "python"
		}
		fmt.Fprintf(&b, "  #%-2d %-6s %s", i, kind, f.Function)
		switch {
		case f.File != "":
			fmt.Fprintf(&b, " (%s:%d)", f.File, f.Line)
		case !isPython(f):
			fmt.Fprintf(&b, "%#x in %s", f.Addr, cmp.Or(files[f.Mapping], "no mapping"))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// fpBuildTimeout bounds testdata/python/fp/build.sh: a fresh build takes
// about five and a half minutes on two cores; later runs print the path at
// once. The test's own deadline (go test -timeout, 10 minutes by default)
// may come first: the build then stops half a minute before it, and the
// test fails saying so rather than the test binary panicking.
const fpBuildTimeout = 20 * time.Minute

// fpPython returns the interpreter testdata/python/fp/build.sh builds. When
// the script cannot fetch the source (exit status 2: no network) the test
// is skipped, unless CI=true; any other failure fails it.
func fpPython(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(fpBuildTimeout)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(deadline) {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	script := filepath.Join(probetest.Root(), "testdata", "python", "fp", "build.sh")
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script)
	cmd.Stderr = &stderr
	// A build cut short stops whole: make and the compilers too, which
	// would otherwise go on holding the script's lock.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish by %s (the test's deadline, or %v): run it alone first, or go test -timeout 20m",
			script, deadline.Format(time.TimeOnly), fpBuildTimeout)
	}
	if err != nil {
		last := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(last, '\n'); i >= 0 {
			last = last[i+1:]
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 2 && os.Getenv("CI") != "true" {
			t.Skipf("%s cannot fetch the CPython source: %s", script, last)
		}
		t.Fatalf("%s: %v: %s", script, err, last)
	}
	python := strings.TrimSpace(string(out))
	require.FileExists(t, python)
	return python
}

// buildVPExt builds testdata/python/fp/vpext.c against python's headers
// and the fake CUDA runtime, with frame pointers and no sibling calls, into
// dir/vpext.so.
func buildVPExt(tb testing.TB, python, dir string) {
	tb.Helper()
	src := filepath.Join(probetest.Root(), "testdata", "python", "fp", "vpext.c")
	cudart := probetest.Lib(tb, "libcudart.so.12")
	include := filepath.Join(filepath.Dir(filepath.Dir(python)), "include", "python3.11")
	cmd := exec.Command("gcc", "-shared", "-fPIC", "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
		"-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-fno-optimize-sibling-calls",
		"-I", include, "-I", filepath.Join(probetest.Root(), "testdata", "cuda"),
		"-o", filepath.Join(dir, "vpext.so"), src, cudart, "-Wl,-rpath,"+filepath.Dir(cudart))
	out, err := cmd.CombinedOutput()
	require.NoError(tb, err, "%s\n%s", strings.Join(cmd.Args, " "), out)
}
