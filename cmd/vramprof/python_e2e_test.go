//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestRunPython profiles a real CPython that loads the CUDA runtime late,
// through ctypes (dlopen), as `import torch` does, and compares every total
// with the script's own record of what it allocated. The interpreter is
// reached the way users reach it (here through pyenv's shim: a shell script
// that execs the real interpreter), so the run also crosses execs.
func TestRunPython(t *testing.T) {
	probetest.RequirePrivilege(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 not found; CI=true: the CPython test must run")
		}
		t.Skip("python3 not found")
	}
	t.Parallel()
	tmp := t.TempDir()
	truthPath := filepath.Join(tmp, "truth.json")
	dir := filepath.Join(tmp, "out")
	script := filepath.Join(probetest.Root(), "testdata", "python", "alloc.py")
	r := vramprof(t, execOpts{dir: tmp, env: []string{
		"VRAMPROF_TRUTH=" + truthPath,
		"FAKECUDA_LIB=" + probetest.Lib(t, "libcudart.so.12"),
	}}, "run", "-o", dir, "--", python, script)
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	truth := probetest.MustReadTruth(t, truthPath)
	require.NotZero(t, truth.Totals.Allocations)

	rep := mustReadReport(t, filepath.Join(dir, "report.json"))
	for name, pair := range map[string][2]uint64{
		"allocations":        {truth.Totals.Allocations, val(t, "allocations", rep.Totals.Allocations)},
		"frees":              {truth.Totals.Frees, val(t, "frees", rep.Totals.Frees)},
		"failed_allocations": {truth.Totals.FailedAllocations, val(t, "failed_allocations", rep.Totals.FailedAllocations)},
		"allocated_bytes":    {truth.Totals.AllocatedBytes, val(t, "allocated_bytes", rep.Totals.AllocatedBytes)},
		"peak_bytes":         {truth.Totals.PeakBytes, val(t, "peak_bytes", rep.Totals.PeakBytes)},
		"live_bytes_at_end":  {truth.Totals.LiveBytesAtEnd, val(t, "live_bytes_at_end", rep.Totals.LiveBytesAtEnd)},
	} {
		assert.Equal(t, pair[0], pair[1], name)
	}
	assert.Zero(t, val(t, "lost_events", rep.Totals.LostEvents))
	checkReplay(t, dir)
}
