package python

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResolveLive runs stacks.py under every CPython 3.10-3.14 installed
// here (Debian's static /usr/bin/python3.11, pyenv's shared-libpython
// builds) and compares Find and the Resolver with what the interpreter
// reports about itself.
func TestResolveLive(t *testing.T) {
	needRoot(t)
	ins := supportedInterpreters(t)
	if len(ins) == 0 {
		if inCI() {
			t.Fatal("no CPython 3.10-3.14 installed (CI installs python3.11: .ci/run)")
		}
		t.Skip("no CPython 3.10-3.14 installed")
	}
	for _, in := range ins {
		t.Run(in.name, func(t *testing.T) { testResolveLive(t, in) })
	}
}

func testResolveLive(t *testing.T, py interpreter) {
	truth := mustStartScript(t, py.python)
	in, err := Find(truth.PID)
	require.NoError(t, err)

	// 3.10 has no Py_Version: the micro comes from PY_VERSION in .rodata.
	want := Version{truth.Version[0], truth.Version[1], truth.Version[2]}
	assert.Equal(t, want, in.Version, "Version")
	assert.Equal(t, truth.RuntimeAddr, in.RuntimeAddr, "RuntimeAddr")
	assert.Equal(t, truth.RuntimeFile, in.Path, "Path")
	if tl, ok := tableLayout(in.Version); ok {
		assert.Equal(t, tl, in.Layout, "Layout (3.13+: from _Py_DebugOffsets)")
	}

	// The raw instruction word the walker records needs co_code_adaptive's
	// offset, taken from the compiler, not from package python.
	adaptive := int64(-1)
	if py.include != "" {
		adaptive = offsetOf(t, mustCompileOffsets(t, py.include), "CodeAdaptive")
	}
	instrOf := func(code uint64, lasti int64) (uint64, bool) {
		switch {
		case !in.Version.AtLeast(3, 11):
			return uint64(uint32(int32(lasti / 2))), true // C f_lasti counts code units
		case adaptive < 0:
			return 0, false
		default:
			return code + uint64(adaptive) + uint64(lasti), true
		}
	}

	r := NewResolver(truth.PID, in)
	t.Cleanup(func() { require.NoError(t, r.Close()) })

	t.Run("live frames", func(t *testing.T) {
		require.NotEmpty(t, truth.Frames)
		for i, fr := range truth.Frames {
			instr, ok := instrOf(fr.Code, fr.Lasti)
			got, resolved := r.Frame(fr.Code, instr)
			require.True(t, resolved, "frame %d %s", i, fr.Name)
			assert.Equal(t, fr.Name, got.Function, "frame %d", i)
			assert.Equal(t, fr.Filename, got.File, "frame %d %s", i, fr.Name)
			assert.Equal(t, fr.Code, got.Addr, "frame %d %s", i, fr.Name)
			if ok {
				assert.Equal(t, fr.Lineno, got.Line, "frame %d %s: line", i, fr.Name)
				// The owner byte in the top 8 bits changes nothing.
				got2, _ := r.Frame(fr.Code, instr|1<<56)
				assert.Equal(t, got, got2, "frame %d %s with an owner byte", i, fr.Name)
			}
		}
	})

	t.Run("forked child gone", func(t *testing.T) {
		// A child that exited before its stacks were read: its code
		// objects, inherited, come from the parent's memory; a resolver
		// without a parent gives placeholders.
		done := exec.Command("true")
		require.NoError(t, done.Run())
		gone := done.Process.Pid
		orphan := NewResolver(gone, in)
		child := NewResolver(truth.PID, in).Fork(gone)
		t.Cleanup(func() { _ = orphan.Close(); _ = child.Close(); _ = child.parent.Close() })
		require.NotEmpty(t, truth.Functions)
		for _, fn := range truth.Functions {
			got, ok := child.Frame(fn.ID, 0)
			require.True(t, ok, "%s", fn.Name)
			assert.Equal(t, fn.Name, got.Function)
			_, ok = orphan.Frame(fn.ID, 0)
			assert.False(t, ok, "%s without a parent", fn.Name)
		}
	})

	t.Run("functions", func(t *testing.T) {
		names := map[string]bool{}
		for _, fn := range truth.Functions {
			got, ok := r.Frame(fn.ID, 0)
			require.True(t, ok, "%s", fn.Name)
			assert.Equal(t, fn.Name, got.Function)
			assert.Equal(t, fn.Filename, got.File, "%s", fn.Name)
			names[got.Function] = true
			// Before the first instruction (C f_lasti -1, prev_instr one
			// code unit before the bytecode): co_firstlineno.
			before, ok := instrOf(fn.ID, -2)
			if !ok {
				continue
			}
			if !in.Version.AtLeast(3, 11) {
				before = 0xffffffff
			}
			got, _ = r.Frame(fn.ID, before)
			assert.Equal(t, fn.FirstLineno, got.Line, "%s: line before the first instruction", fn.Name)
		}
		// Latin-1, UCS-2, UCS-4 names and a qualname, decoded.
		for _, name := range []string{"größe", "функция", "𠀀"} {
			assert.True(t, names[name], "%s resolved", name)
		}
		if in.Version.AtLeast(3, 11) {
			assert.True(t, names["Klasse.methode"], "qualname")
			assert.True(t, names["Outer.Inner.deep"], "qualname")
		}
	})

	t.Run("not code", func(t *testing.T) {
		// Inside a code object, past its header (ID+1 is the code itself on
		// 3.14, whose _PyStackRef tags the pointer's low 3 bits).
		inside := truth.Functions[0].ID + 8
		addrs := append([]uint64{0, 8, 0xdead_beef_0000, truth.RuntimeAddr, inside,
			1 << 63, ^uint64(0) &^ 7}, truth.NotCode...)
		for _, a := range addrs {
			got, ok := r.Frame(a, 0)
			assert.False(t, ok, "%#x", a)
			assert.Equal(t, fmt.Sprintf("<python code %#x>", a), got.Function)
			assert.Empty(t, got.File)
			assert.Zero(t, got.Line)
		}
	})

	if in.Version.AtLeast(3, 14) {
		t.Run("tagged", func(t *testing.T) { // a _PyStackRef's tag bits name the same code
			id := truth.Functions[0].ID
			want, ok := r.Frame(id, 0)
			require.True(t, ok)
			for _, tag := range []uint64{1, 3} {
				got, ok := r.Frame(id|tag, 0)
				assert.True(t, ok, "%#x", id|tag)
				assert.Equal(t, want, got, "%#x", id|tag)
			}
		})
	}
}

// TestFindNotPython: a process without CPython is ErrNotPython; one that
// has exited is an error, not a panic.
func TestFindNotPython(t *testing.T) {
	needRoot(t)
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	_, err := Find(cmd.Process.Pid)
	assert.ErrorIs(t, err, ErrNotPython)

	done := exec.Command("true")
	require.NoError(t, done.Run())
	_, err = Find(done.Process.Pid)
	assert.Error(t, err)
	assert.NotErrorIs(t, err, ErrNotPython)
}

// TestFindStripped: an executable named like an interpreter that defines
// no _PyRuntime (stripped of its symbols) is ErrUnsupported, saying so,
// not ErrNotPython: the report then tells why the stacks are native.
func TestFindStripped(t *testing.T) {
	needRoot(t)
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	data, err := os.ReadFile(sleep)
	require.NoError(t, err)
	fake := filepath.Join(t.TempDir(), "python3.11")
	require.NoError(t, os.WriteFile(fake, data, 0o755))
	cmd := exec.Command(fake, "30")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	_, err = Find(cmd.Process.Pid)
	require.ErrorIs(t, err, ErrUnsupported)
	assert.Contains(t, err.Error(), fake+" defines no _PyRuntime symbol")
}

// TestFindUnsupported: interpreters older than 3.10 (pyenv's, where
// installed) are ErrUnsupported, named with file and version.
func TestFindUnsupported(t *testing.T) {
	needRoot(t)
	n := 0
	for _, py := range interpreters(t) {
		if py.minor >= 10 {
			continue
		}
		n++
		t.Run(py.name, func(t *testing.T) {
			cmd := exec.Command(py.python, "-c", "import sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()")
			stdin, err := cmd.StdinPipe()
			require.NoError(t, err)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
			buf := make([]byte, 6)
			_, err = out.Read(buf)
			require.NoError(t, err)

			_, err = Find(cmd.Process.Pid)
			require.Error(t, err)
			if errors.Is(err, ErrNotPython) {
				t.Skipf("%s: no _PyRuntime (before 3.7)", py.python)
			}
			assert.ErrorIs(t, err, ErrUnsupported)
			assert.Contains(t, err.Error(), fmt.Sprintf("3.%d", py.minor))
			assert.True(t, strings.Contains(err.Error(), filepath.Base(py.python)) ||
				strings.Contains(err.Error(), fmt.Sprintf("libpython3.%d", py.minor)), "%v names the file", err)
		})
	}
	if n == 0 {
		t.Skip("no CPython before 3.10 installed")
	}
}
