package symbolize

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The test binaries are compiled once per run into a temporary directory,
// from the C and C++ sources in testdata. Ground truth comes from outside
// this package: readelf's view of the files, the programs' own view of their
// addresses, and LINE_ markers in the sources.

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// artifacts is where the compiled test binaries are.
type artifacts struct {
	dir string
}

func (a artifacts) path(name string) string { return filepath.Join(a.dir, name) }

// mustBuild compiles the test binaries on first use. Without a compiler the
// test is skipped, except under CI=true, where it fails.
func mustBuild(tb testing.TB) artifacts {
	tb.Helper()
	for _, tool := range []string{"gcc", "g++", "readelf"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				tb.Fatalf("%s is needed to build the test binaries: %v", tool, err)
			}
			tb.Skipf("%s not installed: cannot build the test binaries", tool)
		}
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "symbolize-test-")
		if buildErr != nil {
			return
		}
		src, err := filepath.Abs("testdata")
		if err != nil {
			buildErr = err
			return
		}
		flags := []string{"-g", "-O0", "-fno-omit-frame-pointer", "-Wl,--build-id"}
		prog := []string{filepath.Join(src, "prog.c"), "-L.", "-lfoo", "-Wl,-rpath,$ORIGIN"}
		steps := [][]string{
			{"gcc", "-fPIC", "-shared", "-Wl,--version-script=" + filepath.Join(src, "libfoo.map"),
				"-o", "libfoo.so", filepath.Join(src, "libfoo.c")},
			append([]string{"gcc", "-fPIE", "-pie", "-o", "prog-pie"}, prog...),
			append([]string{"gcc", "-fno-pie", "-no-pie", "-o", "prog-nopie"}, prog...),
			{"g++", "-fPIC", "-shared", "-o", "libwidget.so", filepath.Join(src, "widget.cc")},
		}
		for _, step := range steps {
			args := append(append([]string{}, flags...), step[1:]...)
			cmd := exec.Command(step[0], args...)
			cmd.Dir = buildDir
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
				return
			}
		}
	})
	require.NoError(tb, buildErr)
	return artifacts{dir: buildDir}
}

// markerLine returns the 1-based line of testdata/file holding marker.
func markerLine(tb testing.TB, file, marker string) int64 {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	require.NoError(tb, err)
	for i, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "// "+marker) {
			return int64(i + 1)
		}
	}
	tb.Fatalf("no %s in %s", marker, file)
	return 0
}

// readelfBuildID is the build ID as binutils sees it.
func readelfBuildID(tb testing.TB, path string) string {
	tb.Helper()
	out, err := exec.Command("readelf", "-n", path).Output()
	require.NoError(tb, err)
	m := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindSubmatch(out)
	require.NotNil(tb, m, "readelf found no build ID in %s", path)
	return string(m[1])
}

// readelfSymbols maps names as binutils prints them ("foo@@LIBFOO_1.0",
// "leaf") to their values, from both symbol tables.
func readelfSymbols(tb testing.TB, path string) map[string]uint64 {
	tb.Helper()
	out, err := exec.Command("readelf", "-W", "-s", path).Output()
	require.NoError(tb, err)
	syms := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 || !strings.HasSuffix(f[0], ":") || f[6] == "UND" {
			continue
		}
		v, err := strconv.ParseUint(f[1], 16, 64)
		if err != nil {
			continue
		}
		syms[f[7]] = v
	}
	return syms
}

// target is a running test program, stopped in getchar.
type target struct {
	pid   uint32
	leaf  uint64 // entry of leaf
	ret   uint64 // return address into caller, taken inside leaf
	foo   uint64 // entry of foo in libfoo.so
	stdin interface{ Close() error }
}

// mustStart runs a test program and reads the addresses it prints. It is
// stopped and reaped at cleanup.
func mustStart(tb testing.TB, path string) target {
	tb.Helper()
	cmd := exec.Command(path)
	stdin, err := cmd.StdinPipe()
	require.NoError(tb, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(tb, err)
	require.NoError(tb, cmd.Start())
	tb.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(tb, err)
	t := target{pid: uint32(cmd.Process.Pid), stdin: stdin}
	_, err = fmt.Sscanf(line, "%v %v %v", &t.leaf, &t.ret, &t.foo)
	require.NoError(tb, err, "program printed %q", line)
	return t
}
