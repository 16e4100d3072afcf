//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestAttachAll runs `vramprof attach --all` while longrun (already mapping
// the runtime) and then a fresh steady process run: both are traced, each
// process's figures equal its own truth; longrun was attached mid-run. Other tests' processes may be
// traced too (tests run in parallel), so figures are compared per PID.
func TestAttachAll(t *testing.T) {
	probetest.RequirePrivilege(t)
	lr := startLongrun(t)
	stop, stderr := startAll(t)

	steadyTruth := filepath.Join(t.TempDir(), "steady.json")
	steady := exec.Command(probetest.Bin(t, "steady"))
	steady.Env = append(os.Environ(), "VRAMPROF_TRUTH="+steadyTruth)
	require.NoError(t, steady.Run())
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
	lr.expect(t, "done")

	procs := stop()
	for _, truthPath := range []string{steadyTruth, lr.truth} {
		assertTruth(t, procs, probetest.MustReadTruth(t, truthPath), stderr)
	}
	// longrun ran before the session: attached mid-run, however the
	// processes started later are judged (attach_all_loaded_e2e_test.go).
	assert.NotEqual(t, "traced_from_start", procs[uint32(lr.pid)].PreexistingBasis, "longrun ran before the session")
}
