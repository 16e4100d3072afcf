//go:build linux

package probes

import (
	"bufio"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startStopped starts argv and stops it with SIGSTOP, as the BPF side
// does at a library load. It is killed at cleanup.
func startStopped(t *testing.T, argv ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	return startStoppedAttr(t, nil, argv...)
}

// startStoppedAttr is startStopped with attr (a process group or session
// of its own).
func startStoppedAttr(t *testing.T, attr *syscall.SysProcAttr, argv ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = attr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "%v's first line", argv)
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	awaitState(t, cmd.Process.Pid, 'T', true)
	return cmd, lines
}

// TestResumeKeepsUserStops: resume sends SIGCONT to a stopped process,
// except when a stop signal of the user's waits in its queue (a SIGCONT
// would discard it); a stop signal the process handles is delivered after
// the SIGCONT instead of discarded.
func TestResumeKeepsUserStops(t *testing.T) {
	// A shell that says it is ready, then runs a trap on SIGTSTP.
	const script = `trap 'echo tstp' TSTP; echo ready; while :; do sleep 0.05; done`

	t.Run("none pending", func(t *testing.T) {
		cmd, _ := startStopped(t, "sh", "-c", script)
		user, err := resume(cmd.Process.Pid)
		require.NoError(t, err)
		assert.Zero(t, user)
		awaitState(t, cmd.Process.Pid, 'T', false)
	})
	t.Run("user SIGSTOP", func(t *testing.T) {
		cmd, _ := startStopped(t, "sh", "-c", script)
		pid := cmd.Process.Pid
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP)) // the user's, while stopped
		user, err := resume(pid)
		require.NoError(t, err)
		assert.Equal(t, syscall.SIGSTOP, user)
		assert.Equal(t, byte('T'), procState(pid), "left stopped")
		p, ok := pendingStops(pid)
		require.True(t, ok)
		assert.Equal(t, syscall.SIGSTOP, p.stop, "the user's stop still pending")
		require.NoError(t, syscall.Kill(pid, syscall.SIGCONT)) // the user's own
		awaitState(t, pid, 'T', false)
	})
	t.Run("handled SIGTSTP", func(t *testing.T) {
		cmd, lines := startStopped(t, "sh", "-c", script)
		pid := cmd.Process.Pid
		require.NoError(t, syscall.Kill(pid, syscall.SIGTSTP))
		p, ok := pendingStops(pid)
		require.True(t, ok)
		assert.Equal(t, []syscall.Signal{syscall.SIGTSTP}, p.again, "pending and handled")
		user, err := resume(pid)
		require.NoError(t, err)
		assert.Zero(t, user, "a handled SIGTSTP does not stop it")
		got := make(chan string, 1)
		go func() {
			if lines.Scan() {
				got <- lines.Text()
			}
			close(got)
		}()
		select {
		case l := <-got:
			assert.Equal(t, "tstp", l, "the trap ran")
		case <-time.After(10 * time.Second):
			t.Fatal("the SIGTSTP trap never ran: the signal was discarded")
		}
	})
	t.Run("blocked SIGTSTP", func(t *testing.T) {
		// A process that blocks SIGTSTP: one pending would never stop
		// it, so it is not the user's stop.
		cmd, _ := startStopped(t, "/usr/bin/python3", "-c",
			"import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTSTP])\nprint('ready', flush=True)\nwhile True: time.sleep(0.05)")
		pid := cmd.Process.Pid
		require.NoError(t, syscall.Kill(pid, syscall.SIGTSTP))
		p, ok := pendingStops(pid)
		require.True(t, ok)
		assert.Zero(t, p.stop, "a blocked SIGTSTP stops nothing")
		user, err := resume(pid)
		require.NoError(t, err)
		assert.Zero(t, user)
		awaitState(t, pid, 'T', false)
	})
	// SIGTSTP left to its default action: it stops a process whose group
	// has a parent elsewhere in its session, and the kernel discards it
	// in an orphaned group (a session of its own: its parent, this test,
	// is in another session).
	// (Python: a shell blocks every signal around each fork, and a
	// blocked SIGTSTP is sent again, not the user's stop yet.)
	plain := []string{"/usr/bin/python3", "-c", "import time\nprint('ready', flush=True)\ntime.sleep(600)"}
	t.Run("default SIGTSTP", func(t *testing.T) {
		cmd, _ := startStoppedAttr(t, &syscall.SysProcAttr{Setpgid: true}, plain...)
		pid := cmd.Process.Pid
		require.NoError(t, syscall.Kill(pid, syscall.SIGTSTP))
		user, err := resume(pid)
		require.NoError(t, err)
		assert.Equal(t, syscall.SIGTSTP, user, "the user's stop")
		assert.Equal(t, byte('T'), procState(pid), "left stopped")
	})
	t.Run("default SIGTSTP, orphaned group", func(t *testing.T) {
		cmd, _ := startStoppedAttr(t, &syscall.SysProcAttr{Setsid: true}, plain...)
		pid := cmd.Process.Pid
		require.NoError(t, syscall.Kill(pid, syscall.SIGTSTP))
		user, err := resume(pid)
		require.NoError(t, err)
		assert.Zero(t, user, "discarded by the kernel: stops nothing")
		awaitState(t, pid, 'T', false)
	})
}
