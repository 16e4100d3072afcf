//go:build linux && cgo

package nvml

// Tests against NVIDIA's real libnvidia-ml.so.1 (Debian's libnvidia-ml1,
// fetched by testdata/nvidia/fetch.sh) on a machine without the driver: the
// failure path, exactly as users without a GPU meet it.

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// fetched is testdata/nvidia/fetch.sh's result, run once per test binary.
var fetched struct {
	once sync.Once
	path string // libnvidia-ml.so.1
	err  error
}

// mustRealNVML returns the path of NVIDIA's libnvidia-ml.so.1, fetching it
// on first use. Without it the test is skipped with the reason, except
// under CI=true, where it fails.
func mustRealNVML(tb testing.TB) string {
	tb.Helper()
	fetched.once.Do(func() {
		fetched.path, fetched.err = fetchNVML()
	})
	if fetched.err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("NVIDIA's libnvidia-ml.so.1 is needed under CI: %v", fetched.err)
		}
		tb.Skipf("NVIDIA's libnvidia-ml.so.1 is not available: %v", fetched.err)
	}
	if _, err := os.Stat("/proc/driver/nvidia"); err == nil {
		tb.Skip("the NVIDIA driver is loaded here: the no-driver path cannot be tested")
	}
	return fetched.path
}

func fetchNVML() (string, error) {
	// The first run downloads about 15 MB of package lists and 1 MB of
	// packages; later runs find them extracted and return at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	script, err := filepath.Abs("../../testdata/nvidia/fetch.sh")
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", script, err, lastLine(stderr.String()))
	}
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); filepath.Base(line) == DefaultLibraryPath {
			return line, nil
		}
	}
	return "", fmt.Errorf("%s printed no path to %s: %q", script, DefaultLibraryPath, out)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// TestRealLibraryNoDriver is the path every machine without a GPU takes:
// the library loads, nvmlInit fails, and Open says so in one line.
func TestRealLibraryNoDriver(t *testing.T) {
	path := mustRealNVML(t)
	_, statErr := os.Lstat(controlNode)
	hadNode := statErr == nil

	for range 2 { // a second Open meets the same state, not a half-initialised one
		s, err := Open(Options{LibraryPath: path})
		require.ErrorIs(t, err, ErrUnavailable)
		assert.Nil(t, s)
		assert.Equal(t, "NVML unavailable: nvmlInit: Driver Not Loaded", err.Error())
		var ne *Error
		require.ErrorAs(t, err, &ne)
		assert.Equal(t, int(nvml.ERROR_DRIVER_NOT_LOADED), ne.Code)
		assert.Equal(t, err.Error(), Status(1, err).Reason)
	}

	if os.Geteuid() == 0 && !hadNode {
		// As root, nvmlInit creates /dev/nvidiactl before it gives up.
		_, err := os.Lstat(controlNode)
		assert.ErrorIs(t, err, fs.ErrNotExist, "the control node NVML created is left behind")
	}
}

// TestRealLibrarySymbols checks the names the adapter relies on against a
// real driver's library: every name preflight knows, each version of the
// functions it requires and of the process lists, all exported.
func TestRealLibrarySymbols(t *testing.T) {
	f, err := elf.Open(mustRealNVML(t))
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	exported := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			exported[s.Name] = true
		}
	}
	for _, names := range append(slices.Clone(required), processLists...) {
		for _, name := range names {
			assert.True(t, exported[name], "%s is not exported by %s", name, f)
		}
	}
}

func TestLibraryNotNVML(t *testing.T) {
	tests := []struct {
		name, path string
		want       []string // parts of the one-line reason
	}{
		{"missing file", "/nonexistent/libnvidia-ml.so.1",
			[]string{"NVML unavailable: nvmlInit: /nonexistent/libnvidia-ml.so.1: cannot open shared object file"}},
		// Calling into it would end the process: the check comes first.
		{"another library", "libm.so.6",
			[]string{"NVML unavailable: nvmlInit: libm.so.6 is not NVIDIA's management library: ", "nvmlInit"}},
		{"not a library", "/etc/passwd",
			[]string{"NVML unavailable: nvmlInit: /etc/passwd: "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(Options{LibraryPath: tt.path})
			require.ErrorIs(t, err, ErrUnavailable)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "\n")
			var ne *Error
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, int(nvml.ERROR_LIBRARY_NOT_FOUND), ne.Code)
		})
	}
}

const childEnv = "VRAMPROF_NVML_TEST_CHILD"

// TestDefaultLibraryMissing opens NVML with default options on a machine
// without the driver installed. It runs in a child process: once a test
// here has loaded the fetched library, the loader would find it by its
// soname.
func TestDefaultLibraryMissing(t *testing.T) {
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil && bytes.Contains(out, []byte(DefaultLibraryPath)) {
		t.Skipf("%s is installed on this machine", DefaultLibraryPath)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDefaultLibraryChild$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out),
		"OPEN: NVML unavailable: nvmlInit: libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n")
}

func TestDefaultLibraryChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("run by TestDefaultLibraryMissing")
	}
	s, err := Open(Options{})
	if s != nil {
		_ = s.Close()
	}
	require.True(t, errors.Is(err, ErrUnavailable), "%v", err)
	fmt.Printf("OPEN: %v\n", err)
}

// TestPreflightStandIns: preflight against testdata's stand-in builds
// (testdata/nvml/nvml.c). A library with only the newest version of each
// function (nvml-latest) or only the oldest (nvml-v1) lacks nothing, as
// go-nvml calls whichever it has; one without process lists (nvml-noprocs)
// still opens, the lists it lacks named; NVIDIA's missing nvmlInit under
// both names is not NVML at all.
func TestPreflightStandIns(t *testing.T) {
	probetest.Build(t)
	lib := func(variant string) string {
		return filepath.Join(probetest.Root(), "testdata", "build", variant, DefaultLibraryPath)
	}
	for _, tt := range []struct {
		variant string
		missing map[string]bool
	}{
		{"nvml", nil},
		{"nvml-v1", nil},
		{"nvml-latest", nil},
		{"nvml-noprocs", map[string]bool{computeProcesses: true, graphicsProcesses: true}},
	} {
		t.Run(tt.variant, func(t *testing.T) {
			missing, err := preflight(lib(tt.variant))
			require.NoError(t, err)
			assert.Equal(t, tt.missing, missing)
		})
	}
	_, err := preflight("libm.so.6")
	assert.ErrorContains(t, err, "libm.so.6 is not NVIDIA's management library: ")

	e := &missingError{fn: computeProcesses, path: lib("nvml-noprocs")}
	assert.ErrorIs(t, e, ErrNotSupported, "a list the library lacks is one it cannot give")
	assert.Equal(t, "per-process figures not available: nvmlDeviceGetComputeRunningProcesses: not exported by "+
		lib("nvml-noprocs")+" (an older or partial NVML library); the device's figures are NVML's", processesNote(e))
}
