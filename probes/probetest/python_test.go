package probetest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pythonCheck loads the library argv[1] through ctypes (dlopen, as a
// workload loads the fake CUDA runtime), calls mix(a, b) and says what it
// got, which interpreter it is, and which files its process maps.
const pythonCheck = `
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.vramprof_mix.restype = ctypes.c_int64
lib.vramprof_mix.argtypes = [ctypes.c_int64, ctypes.c_int64]
maps = set()
with open("/proc/self/maps") as f:
    for line in f:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/"):
            maps.add(fields[5].strip())
print(json.dumps({
    "version": "%d.%d" % sys.version_info[:2],
    "mix": lib.vramprof_mix(int(sys.argv[2]), int(sys.argv[3])),
    "executable": sys.executable,
    "maps": sorted(maps),
}))
`

// TestPythons runs every interpreter Pythons returns with a ctypes call into
// a library gcc builds here, against the system's glibc.
func TestPythons(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libmix.so")
	src := filepath.Join(t.TempDir(), "mix.c")
	require.NoError(t, os.WriteFile(src, []byte(
		"long long vramprof_mix(long long a, long long b) { return a * 1000 + b; }\n"), 0o644))
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}

	pythons := Pythons(t)
	require.NotEmpty(t, pythons, "no CPython interpreter at all")
	names := map[string]bool{}
	for i, p := range pythons {
		require.False(t, names[p.Name], "two interpreters named %s", p.Name)
		names[p.Name] = true
		t.Run(p.Name, func(t *testing.T) {
			t.Logf("%s: %v, _PyRuntime in %s (shared %v)", p.Version, p.Argv, p.Runtime, p.Shared)
			require.NoError(t, definesPyRuntime(p.Runtime))
			assert.Equal(t, p.Shared, strings.HasPrefix(filepath.Base(p.Runtime), "libpython"), "Shared against Runtime %s", p.Runtime)

			a, b := int64(7+i), int64(-300-i) // differ per interpreter: no answer from a cache
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := p.Command(ctx, "-c", pythonCheck, lib, strconv.FormatInt(a, 10), strconv.FormatInt(b, 10))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			require.NoError(t, err, "stderr: %s", stderr.String())
			var got struct {
				Version    string   `json:"version"`
				Mix        int64    `json:"mix"`
				Executable string   `json:"executable"`
				Maps       []string `json:"maps"`
			}
			require.NoError(t, json.Unmarshal(out, &got), "output: %s", out)
			assert.Equal(t, p.Version, got.Version)
			assert.Equal(t, a*1000+b, got.Mix)
			// sys.executable starts the same interpreter again (subprocess,
			// multiprocessing): for a wrapper, the wrapper.
			assert.Equal(t, p.Argv[0], got.Executable)

			// The file holding _PyRuntime is mapped into the process, as
			// the unwinder will look for it, and so is the library.
			runtime, err := os.Stat(p.Runtime)
			require.NoError(t, err)
			var mapsRuntime, mapsLib bool
			for _, m := range got.Maps {
				if fi, err := os.Stat(m); err == nil {
					mapsRuntime = mapsRuntime || os.SameFile(fi, runtime)
				}
				mapsLib = mapsLib || m == lib
			}
			assert.True(t, mapsRuntime, "%s is not mapped; maps: %v", p.Runtime, got.Maps)
			assert.True(t, mapsLib, "%s is not mapped", lib)
		})
	}
}

// TestPythonsAlloc runs testdata/python/alloc.py, the CPython workload of the
// profiler's tests, on the fake CUDA runtime under every interpreter. The
// workload is deterministic: each interpreter's truth is the same.
func TestPythonsAlloc(t *testing.T) {
	cudart := Lib(t, "libcudart.so.12")
	script := filepath.Join(Root(), "testdata", "python", "alloc.py")
	var first *Truth
	var firstName string
	for _, p := range Pythons(t) {
		t.Run(p.Name, func(t *testing.T) {
			truthPath := filepath.Join(t.TempDir(), "truth.json")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := p.Command(ctx, script)
			cmd.Env = append(os.Environ(), "FAKECUDA_LIB="+cudart, "VRAMPROF_TRUTH="+truthPath)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "output: %s", out)
			truth := MustReadTruth(t, truthPath)
			require.NotZero(t, truth.Totals.Allocations)
			require.NotEmpty(t, truth.ByFunction)
			if first == nil {
				first, firstName = truth, p.Name
				return
			}
			assert.Equal(t, first.Totals, truth.Totals, "totals against %s's", firstName)
			assert.Equal(t, first.ByFunction, truth.ByFunction, "by_function against %s's", firstName)
		})
	}
}
