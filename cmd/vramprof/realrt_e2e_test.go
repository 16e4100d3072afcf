//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// skipOrFail skips a test that lacks something from outside the repository,
// saying why; under CI=true it fails instead.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+" (CI=true: this test must run)", args...)
	}
	t.Skipf(format, args...)
}

// realCudart returns the path of NVIDIA's libcudart.so.11.0, fetched by
// testdata/nvidia/fetch.sh (a no-op once fetched).
func realCudart(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(probetest.Root(), "testdata", "nvidia", "fetch.sh"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		skipOrFail(t, "testdata/nvidia/fetch.sh: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if filepath.Base(l) == "libcudart.so.11.0" {
			return l
		}
	}
	t.Fatalf("fetch.sh printed no libcudart.so.11.0 path:\n%s", out)
	return ""
}

// realrtSource calls NVIDIA's runtime the way a program does (linked against
// it), with no driver to find, and prints each call's return code.
const realrtSource = `
#include <stdio.h>
#include <stddef.h>
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);

__attribute__((noinline)) void try_alloc(size_t n)
{
	void *p = NULL;
	int r = cudaMalloc(&p, n);
	printf("cudaMalloc %zu %d\n", n, r);
	if (r == 0)
		printf("cudaFree %d\n", cudaFree(p));
}

int main(void)
{
	static const size_t sizes[] = {1 << 20, 64 << 20, 12345, 4096};
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		try_alloc(sizes[i]);
	printf("cudaFree %d\n", cudaFree(NULL));
	return 0;
}
`

// TestRealCudart runs a program linked against NVIDIA's real libcudart
// (CUDA 11.8, Debian's libcudart11.0) without a driver: every call fails, and
// vramprof must find the real file's versioned symbols, probe them, and
// account each failed call, with an OOM finding that says the error is not
// out-of-memory.
func TestRealCudart(t *testing.T) {
	probetest.RequirePrivilege(t)
	rt := realCudart(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		skipOrFail(t, "needs gcc to build the test program")
	}
	// The real runtime must find no driver: none installed, and the fake
	// one (testdata/build/lib) not on any search path.
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil && strings.Contains(string(out), "libcuda.so.1") {
		skipOrFail(t, "a libcuda.so.1 is installed (ldconfig -p): the real runtime would find a driver")
	}
	t.Parallel()

	// The real file's symbols are versioned (cudaMalloc@@libcudart.so.11.0):
	// vramprof must resolve them by their bare names.
	syms, err := exec.Command("readelf", "-W", "--dyn-syms", rt).Output()
	require.NoError(t, err, "readelf %s", rt)
	for _, s := range []string{"cudaMalloc@@libcudart.so.11.0", "cudaFree@@libcudart.so.11.0"} {
		assert.Contains(t, string(syms), " "+s+"\n", "%s defines %s", rt, s)
	}

	tmp := t.TempDir()
	src, prog := filepath.Join(tmp, "realrt.c"), filepath.Join(tmp, "realrt")
	require.NoError(t, os.WriteFile(src, []byte(realrtSource), 0o644))
	libDir := filepath.Dir(rt)
	out, err := exec.Command(gcc, "-O1", "-g", "-fno-omit-frame-pointer", "-o", prog, src,
		"-L"+libDir, "-l:libcudart.so.11.0", "-Wl,-rpath,"+libDir).CombinedOutput()
	require.NoError(t, err, "gcc: %s", out)
	imports, err := exec.Command("readelf", "-W", "--dyn-syms", prog).Output()
	require.NoError(t, err)
	assert.Contains(t, string(imports), "cudaMalloc@libcudart.so.11.0", "the program binds the versioned symbol")

	dir := filepath.Join(tmp, "out")
	r := vramprof(t, execOpts{dir: tmp, env: []string{"LD_LIBRARY_PATH=", "LD_PRELOAD=", "FAKECUDA_DRIVER="}},
		"run", "-o", dir, "--", prog)
	require.Equal(t, 0, r.code, "exit code; stderr:\n%s", r.stderr)

	// What the program itself printed: each call's return code.
	var mallocs, failedMallocs, failedFrees int
	var codes []int
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "cudaMalloc":
			code, err := strconv.Atoi(f[2])
			require.NoError(t, err, "line %q", sc.Text())
			mallocs++
			codes = append(codes, code)
			if code != 0 {
				failedMallocs++
			}
		case len(f) == 2 && f[0] == "cudaFree":
			code, err := strconv.Atoi(f[1])
			require.NoError(t, err, "line %q", sc.Text())
			codes = append(codes, code)
			if code != 0 {
				failedFrees++
			}
		}
	}
	require.Equal(t, 4, mallocs, "the program's cudaMalloc lines; stdout:\n%s", r.stdout)
	for _, c := range codes {
		assert.Equal(t, 35, c, "no driver: cudaErrorInsufficientDriver (DESIGN.md, Testing)")
	}

	rep := mustReadCovReport(t, filepath.Join(dir, "report.json"))
	tt := rep.Totals
	assert.Equal(t, uint64(failedMallocs), tt.FailedAllocations, "failed_allocations = the program's failed cudaMalloc calls")
	assert.Zero(t, tt.Allocations, "allocations")
	assert.Zero(t, tt.Frees, "frees")
	assert.Zero(t, tt.AllocatedBytes, "allocated_bytes")
	assert.Zero(t, tt.PeakBytes, "peak_bytes")
	assert.Zero(t, tt.LiveBytesAtEnd, "live_bytes_at_end")
	assert.Zero(t, tt.LostEvents, "lost_events")
	assert.Equal(t, uint64(failedFrees), tt.FailedFrees, "failed_frees = the program's failed cudaFree calls")

	// The real file (libcudart.so.11.0 is a symlink to it) is probed, its
	// versioned symbols resolved.
	real, err := filepath.EvalSymlinks(rt)
	require.NoError(t, err)
	var found bool
	for _, l := range rep.Libraries {
		if l.Path != real && l.Path != rt {
			continue
		}
		found = true
		assert.Contains(t, l.Symbols, "cudaMalloc", "probed symbols of %s", l.Path)
		assert.Contains(t, l.Symbols, "cudaFree", "probed symbols of %s", l.Path)
	}
	assert.True(t, found, "report.json libraries list %s; got %+v", real, rep.Libraries)
	for _, l := range rep.Libraries {
		assert.NotEqual(t, "libcuda.so.1", filepath.Base(l.Path), "no driver may be loaded: %s", l.Path)
	}

	// Every call failed for want of a driver, not of memory: one
	// failed_call finding naming the runtime's error, no oom (before:
	// "oom (critical)").
	var failed int
	for _, f := range rep.Findings {
		assert.NotEqual(t, "oom", f.Kind, "no driver is no OOM: %+v", f)
		if f.Kind != "failed_call" {
			continue
		}
		failed++
		assert.Equal(t, "critical", f.Severity)
		assert.Contains(t, f.Summary, fmt.Sprintf("%d allocation calls failed with error 35 (cudaErrorInsufficientDriver) (not out-of-memory)", failedMallocs))
		rem := strings.Join(f.Remediation, " ")
		assert.Contains(t, rem, "driver is missing or older", "remediation: %q", rem)
		require.NotEmpty(t, f.Stacks, "the failing stacks")
	}
	assert.Equal(t, 1, failed, "one failed_call finding; findings: %+v", rep.Findings)
}
