//go:build linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestRunCxxThrow: a C++ library's cudaMalloc throws std::bad_alloc
// through its caller (testdata/throw), which catches it and exits 3. The
// exit code under `vramprof run` is the one it has natively: no probe of
// vramprof's may stand in the way of the unwinder (a uretprobe's
// trampoline did: std::terminate, SIGABRT, exit 134). The allocations
// before and after the exception are counted exactly, against the
// program's own truth.
func TestRunCxxThrow(t *testing.T) {
	probetest.RequirePrivilege(t)
	bin := probetest.Bin(t, "cxx_throw")

	native := exec.Command(bin)
	native.Env = append(os.Environ(), "VRAMPROF_TRUTH="+filepath.Join(t.TempDir(), "native.json"))
	err := native.Run()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "cxx_throw natively: %v", err)
	require.Equal(t, 3, exit.ExitCode(), "natively, the exception is caught: exit 3")

	dir, truth, r := runScenario(t, "cxx_throw")
	require.Equal(t, 3, r.code, "under vramprof run; stderr:\n%s", r.stderr)
	assert.NotContains(t, r.stderr, "terminate called")
	// scenarios/cxx_throw.cpp's arithmetic: 4 + 3 allocations (8+16+24+32
	// and 4+12+20 MiB), 5 frees, 24 MiB live at the end; the 2 GiB request
	// threw and allocated nothing.
	const mib = 1 << 20
	require.Equal(t, uint64(7), truth.Totals.Allocations, "truth: allocations")
	require.Equal(t, uint64((8+16+24+32+4+12+20)*mib), truth.Totals.AllocatedBytes, "truth: allocated bytes")
	require.Equal(t, uint64((4+20)*mib), truth.Totals.LiveBytesAtEnd, "truth: live at the end")
	rep := mustReadReport(t, filepath.Join(dir, "report.json"))
	checkReport(t, rep, truth)
	checkReplay(t, dir)
}
