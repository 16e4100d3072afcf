//go:build linux

package probes

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// awaitState waits until pid's state (/proc/PID/stat) is, or is not, want.
func awaitState(t *testing.T, pid int, want byte, is bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for (procState(pid) == want) != is {
		require.True(t, time.Now().Before(deadline), "pid %d state %c, want %c: %v", pid, procState(pid), want, is)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDeferredStop: an --all session's stop of a process another session
// holds is left to that session (late.go): while it holds the process,
// this session does not resume it; once the process runs again (its
// session resumed it), the stop is forgotten; once its session has let go
// and the process is still stopped, this session resumes it.
func TestDeferredStop(t *testing.T) {
	probetest.RequirePrivilege(t)
	lr := exec.Command(probetest.Bin(t, "longrun"))
	lr.Env = append(os.Environ(), "VRAMPROF_TRUTH="+filepath.Join(t.TempDir(), "truth.json"), "LONGRUN_MAX_SECONDS=20")
	out, err := lr.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, lr.Start())
	t.Cleanup(func() { _ = lr.Process.Kill(); _ = lr.Wait() })
	_, err = out.Read(make([]byte, 64)) // "ready <pid>": the runtime is mapped
	require.NoError(t, err)
	pid := lr.Process.Pid

	single, err := NewSession(Options{Sink: &memSink{}})
	require.NoError(t, err)
	defer single.Close()
	require.NoError(t, single.Attach(pid, false))

	// Not AttachAll: that would adopt every CUDA process on the machine.
	all, err := NewSession(Options{Sink: &memSink{}, All: true, Note: func(string) {}})
	require.NoError(t, err)
	defer all.Close()
	require.NoError(t, all.adopt(uint32(pid)))
	require.Contains(t, all.held, uint32(pid), "held by the single-process session")

	// Resumed by the session that holds it: forgotten.
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	awaitState(t, pid, 'T', true)
	all.deferStop(uint32(pid), 1)
	require.NoError(t, all.resumeDeferred())
	assert.Len(t, all.late.deferred, 1, "held and stopped: left to its session")
	assert.Equal(t, byte('T'), procState(pid), "not resumed while held")
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	awaitState(t, pid, 'T', false)
	require.NoError(t, all.resumeDeferred())
	assert.Empty(t, all.late.deferred, "running again: forgotten")

	// Its session lets go while it is stopped: resumed here.
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	awaitState(t, pid, 'T', true)
	all.deferStop(uint32(pid), 2)
	require.NoError(t, single.Close())
	require.NoError(t, all.resumeDeferred())
	assert.Empty(t, all.late.deferred)
	awaitState(t, pid, 'T', false)
}
