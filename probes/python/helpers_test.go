package python

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// Ground truth in these tests comes from outside package python: the C
// compiler reading CPython's headers (testdata/offsets.c), and the
// interpreters themselves running testdata/python/stacks.py.

// scriptPath is the ground-truth script, run by every interpreter found.
var scriptPath = filepath.Join("..", "..", "testdata", "python", "stacks.py")

// inCI reports whether a missing tool fails the test rather than skipping it.
func inCI() bool { return os.Getenv("CI") == "true" }

// interpreter is a CPython installed on this machine, with its headers
// when they are installed too.
type interpreter struct {
	name    string // "debian-3.11", "pyenv-3.12.1"
	python  string // executable
	include string // directory holding Python.h; "" when absent
	minor   int
}

// interpreters lists the CPythons 3.x on this machine: Debian's
// /usr/bin/python3.X (headers in /usr/include/python3.X, package
// python3.X-dev) and pyenv's versions ($PYENV_ROOT, else ~/.pyenv).
func interpreters(tb testing.TB) []interpreter {
	tb.Helper()
	var out []interpreter
	for minor := 6; minor <= 14; minor++ {
		py := fmt.Sprintf("/usr/bin/python3.%d", minor)
		if _, err := os.Stat(py); err != nil {
			continue
		}
		out = append(out, interpreter{name: fmt.Sprintf("debian-3.%d", minor), python: py,
			include: headers(fmt.Sprintf("/usr/include/python3.%d", minor)), minor: minor})
	}
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".pyenv")
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "versions", "3.*"))
	sort.Strings(dirs)
	for _, dir := range dirs {
		v, ok := versionFromName("python" + filepath.Base(dir))
		py := filepath.Join(dir, "bin", fmt.Sprintf("python3.%d", v.Minor))
		if _, err := os.Stat(py); !ok || err != nil {
			continue
		}
		out = append(out, interpreter{name: "pyenv-" + filepath.Base(dir), python: py,
			include: headers(filepath.Join(dir, "include", fmt.Sprintf("python3.%d", v.Minor))), minor: v.Minor})
	}
	// Debian's newer CPythons, unpacked with their headers by
	// testdata/python/fetch.sh (with CI=true, Pythons fails the test when
	// the fetch does): one entry per suite and version, the static build.
	for _, p := range probetest.Pythons(tb) {
		root, _, ok := strings.Cut(p.Runtime, string(filepath.Separator)+"root"+string(filepath.Separator))
		v, vok := versionFromName("python" + p.Version)
		if !ok || !vok || p.Shared || !strings.Contains(root, filepath.Join("testdata", "python", "build")) {
			continue
		}
		include := filepath.Join(root, "root", "usr", "include", "python"+p.Version)
		out = append(out, interpreter{name: "debian-" + strings.TrimSuffix(p.Name, "-shared"), python: p.Argv[0],
			include: headers(include), minor: v.Minor})
	}
	return out
}

// includeFlags are gcc's flags to compile against the headers in include
// (CPython's internal ones too). Debian's pyconfig.h includes
// <x86_64-linux-gnu/python3.X/pyconfig.h> from the directory above: for a
// suite unpacked by testdata/python/fetch.sh that is its root's usr/include,
// searched after the system's, whose libc headers stay the ones used.
func includeFlags(include string) []string {
	return []string{"-DPy_BUILD_CORE", "-I" + include, "-I" + filepath.Join(include, "internal"), "-idirafter", filepath.Dir(include)}
}

// headers returns dir when it holds Python.h and the internal headers.
func headers(dir string) string {
	if _, err := os.Stat(filepath.Join(dir, "internal", "pycore_runtime.h")); err != nil {
		return ""
	}
	return dir
}

// supportedInterpreters are the interpreters of 3.10 to 3.14.
func supportedInterpreters(tb testing.TB) []interpreter {
	var out []interpreter
	for _, in := range interpreters(tb) {
		if in.minor >= 10 && in.minor <= 14 {
			out = append(out, in)
		}
	}
	return out
}

// needRoot skips a test that reads another process's memory without
// privileges, or fails it in CI.
func needRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if inCI() {
		tb.Fatal("reading /proc/PID/mem of the test's children needs root in CI")
	}
	tb.Skip("needs root to read /proc/PID/mem")
}

// needGCC skips without gcc, or fails in CI.
func needGCC(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("gcc"); err == nil {
		return
	}
	if inCI() {
		tb.Fatal("gcc is missing (CI installs it: .ci/run)")
	}
	tb.Skip("gcc is missing")
}

// mustCompileOffsets compiles testdata/offsets.c against the headers in
// include and returns what it prints: field name to offset, and "version"
// to "3.11.2".
func mustCompileOffsets(tb testing.TB, include string) map[string]string {
	tb.Helper()
	needGCC(tb)
	bin := filepath.Join(tb.TempDir(), "offsets")
	cmd := exec.Command("gcc", append(includeFlags(include), "-o", bin, filepath.Join("testdata", "offsets.c"))...)
	out, err := cmd.CombinedOutput()
	require.NoError(tb, err, "compile offsets.c against %s:\n%s", include, out)
	out, err = exec.Command(bin).Output()
	require.NoError(tb, err)
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, value, ok := strings.Cut(line, " ")
		require.True(tb, ok, "offsets output line %q", line)
		m[name] = value
	}
	return m
}

// offsetOf returns a compiled offset as a number.
func offsetOf(tb testing.TB, m map[string]string, name string) int64 {
	tb.Helper()
	v, ok := m[name]
	require.True(tb, ok, "offsets.c printed no %s", name)
	n, err := strconv.ParseInt(v, 10, 64)
	require.NoError(tb, err)
	return n
}

// scriptFrame is a live frame as stacks.py reports it.
type scriptFrame struct {
	scriptCode
	Code   uint64 `json:"code"`
	Lasti  int64  `json:"lasti"`  // frame.f_lasti: bytes, -1 before the first instruction
	Lineno int64  `json:"lineno"` // frame.f_lineno
}

// scriptCode is a code object as stacks.py reports it.
type scriptCode struct {
	ID          uint64 `json:"id"`
	Name        string `json:"name"` // co_qualname (3.11+) or co_name
	Filename    string `json:"filename"`
	FirstLineno int64  `json:"firstlineno"`
}

// scriptTruth is what stacks.py prints while it waits.
type scriptTruth struct {
	PID         int           `json:"pid"`
	Version     []int         `json:"version"`
	Executable  string        `json:"executable"`
	RuntimeAddr uint64        `json:"runtime_addr"`
	RuntimeFile string        `json:"runtime_file"`
	Frames      []scriptFrame `json:"frames"`
	Functions   []scriptCode  `json:"functions"`
	NotCode     []uint64      `json:"not_code"`
}

// mustStartScript runs stacks.py under python and returns its report
// once it waits; cleanup lets it exit.
func mustStartScript(tb testing.TB, python string) *scriptTruth {
	tb.Helper()
	cmd := exec.Command(python, scriptPath)
	stdin, err := cmd.StdinPipe()
	require.NoError(tb, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(tb, err)
	cmd.Stderr = os.Stderr
	require.NoError(tb, cmd.Start())
	tb.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	require.NoError(tb, err, "read the report of %s %s", python, scriptPath)
	var truth scriptTruth
	require.NoError(tb, json.Unmarshal(line, &truth))
	require.Equal(tb, cmd.Process.Pid, truth.PID)
	return &truth
}

// linetableDump is what `stacks.py tables` prints.
type linetableDump struct {
	Version []int `json:"version"`
	Code    []struct {
		Name        string   `json:"name"`
		FirstLineno int      `json:"firstlineno"`
		Linetable   string   `json:"linetable"` // hex
		CodeBytes   int      `json:"code_bytes"`
		Lines       [][3]int `json:"lines"` // co_lines(): start, end (bytes), line (-1: None)
	} `json:"code"`
}

// readLinetableDump parses a dump from r.
func readLinetableDump(tb testing.TB, r io.Reader) *linetableDump {
	tb.Helper()
	var d linetableDump
	require.NoError(tb, json.NewDecoder(r).Decode(&d))
	return &d
}

// fixtureName matches the committed line-table dumps.
var fixtureName = regexp.MustCompile(`^linetables-3\.(\d+)\.json$`)
