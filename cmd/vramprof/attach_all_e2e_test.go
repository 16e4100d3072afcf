//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestAttachAll runs `vramprof attach --all` while longrun (already mapping
// the runtime) and then a fresh steady process run: both are traced, each
// process's figures equal its own truth. Other tests' processes may be
// traced too (tests run in parallel), so figures are compared per PID.
func TestAttachAll(t *testing.T) {
	probetest.RequirePrivilege(t)
	lr := startLongrun(t)

	dir := filepath.Join(t.TempDir(), "out")
	stderr := &syncBuffer{}
	cmd := exec.Command(binPath, "attach", "--all", "-o", dir)
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(stderr.String(), "tracing every CUDA process") {
		require.True(t, time.Now().Before(deadline), "not live; stderr:\n%s", stderr.String())
		time.Sleep(20 * time.Millisecond)
	}

	steadyTruth := filepath.Join(t.TempDir(), "steady.json")
	steady := exec.Command(probetest.Bin(t, "steady"))
	steady.Env = append(os.Environ(), "VRAMPROF_TRUTH="+steadyTruth)
	require.NoError(t, steady.Run())
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
	lr.expect(t, "done")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		require.NoError(t, err, "stderr:\n%s", stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("vramprof attach --all did not stop on SIGTERM")
	}

	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	require.NoError(t, err)
	var rep struct {
		Processes []struct {
			PID            uint32 `json:"pid"`
			Allocations    uint64 `json:"allocations"`
			Frees          uint64 `json:"frees"`
			UnknownFrees   uint64 `json:"unknown_frees"`
			AllocatedBytes uint64 `json:"allocated_bytes"`
			PeakBytes      uint64 `json:"peak_bytes"`
			LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
		} `json:"processes"`
	}
	require.NoError(t, json.Unmarshal(data, &rep))
	for _, truthPath := range []string{steadyTruth, lr.truth} {
		truth := probetest.MustReadTruth(t, truthPath)
		found := false
		for _, p := range rep.Processes {
			if p.PID != truth.PID {
				continue
			}
			found = true
			want := truth.Totals
			assert.Equal(t, want.Allocations, p.Allocations, "%s allocations", truth.Scenario)
			assert.Equal(t, want.Frees, p.Frees, "%s frees", truth.Scenario)
			assert.Equal(t, want.UnknownFrees, p.UnknownFrees, "%s unknown frees", truth.Scenario)
			assert.Equal(t, want.AllocatedBytes, p.AllocatedBytes, "%s allocated bytes", truth.Scenario)
			assert.Equal(t, want.PeakBytes, p.PeakBytes, "%s peak", truth.Scenario)
			assert.Equal(t, want.LiveBytesAtEnd, p.LiveBytesAtEnd, "%s live at end", truth.Scenario)
		}
		assert.True(t, found, "%s (pid %d) traced", truth.Scenario, truth.PID)
	}
}
