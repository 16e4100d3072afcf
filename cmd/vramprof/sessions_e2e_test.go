//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestSecondSessionRefused: while one session traces a process, a second
// `attach -p` on it exits 2 with one line naming the first session's PID,
// creates nothing and touches nothing of the first's, and the first
// records the whole truth. With default output directories, both started
// in the same second would name the same one: the refusal comes first.
func TestSecondSessionRefused(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name string
		out  bool // -o given
	}{{"explicit_dirs", true}, {"default_dirs", false}} {
		t.Run(tc.name, func(t *testing.T) {
			lr := startLongrun(t)
			cwd := t.TempDir()
			var first *attachment
			if tc.out {
				first = startAttach(t, lr.pid)
			} else {
				first = startAttachIn(t, cwd, lr.pid)
			}

			var args []string
			if tc.out {
				args = []string{"-o", filepath.Join(cwd, "second")}
			}
			r := vramprof(t, execOpts{dir: cwd}, append([]string{"attach", "-p", strconv.Itoa(lr.pid)}, args...)...)
			assert.Equal(t, exitToolError, r.code, "second session's exit code; stderr:\n%s", r.stderr)
			lines := r.stderrLines()
			require.Len(t, lines, 1, "one line; stderr:\n%s", r.stderr)
			assert.Contains(t, lines[0], "already traced by another vramprof session")
			assert.Contains(t, lines[0], "vramprof pid "+strconv.Itoa(first.cmd.Process.Pid), "names the first session")
			entries, err := os.ReadDir(cwd)
			require.NoError(t, err)
			if tc.out {
				assert.Empty(t, entries, "nothing created")
			} else {
				assert.Len(t, entries, 1, "the first session's output directory only")
			}

			require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
			lr.expect(t, "done")
			require.NoError(t, first.cmd.Process.Signal(syscall.SIGTERM))
			require.Equal(t, 0, first.wait(t, 20*time.Second), "first session; stderr:\n%s", first.stderr.String())
			truth := probetest.MustReadTruth(t, lr.truth)
			rep := mustReadReport(t, filepath.Join(first.dir, "report.json"))
			assert.Equal(t, truth.Totals.Allocations, val(t, "allocations", rep.Totals.Allocations), "first session's allocations")
			assert.Equal(t, truth.Totals.Frees, val(t, "frees", rep.Totals.Frees), "first session's frees")
		})
	}
}

// TestLockReleasedWhenKilled: a session killed with SIGKILL leaves no lock:
// the next attach on the same process works.
func TestLockReleasedWhenKilled(t *testing.T) {
	probetest.RequirePrivilege(t)
	lr := startLongrun(t)
	first := startAttach(t, lr.pid)
	require.NoError(t, first.cmd.Process.Kill())
	<-first.done
	// Its guardian removes the file it left (the lock went with it).
	owner := strconv.Itoa(first.cmd.Process.Pid) + "\n"
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := ""
		paths, _ := filepath.Glob("/run/vramprof/*.lock")
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil && string(b) == owner {
				left = p
			}
		}
		if left == "" {
			break
		}
		require.True(t, time.Now().Before(deadline), "%s left behind", left)
		time.Sleep(50 * time.Millisecond)
	}

	second := startAttach(t, lr.pid)
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
	lr.expect(t, "done")
	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, second.wait(t, 20*time.Second), "stderr:\n%s", second.stderr.String())
	truth := probetest.MustReadTruth(t, lr.truth)
	rep := mustReadReport(t, filepath.Join(second.dir, "report.json"))
	assert.Equal(t, truth.Totals.Allocations, val(t, "allocations", rep.Totals.Allocations), "allocations")
}

// TestRunChildLocked: the command `run` launched is locked too: an attach
// on it is refused, naming the run session.
func TestRunChildLocked(t *testing.T) {
	probetest.RequirePrivilege(t)
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, binPath, "run", "-q", "-o", filepath.Join(tmp, "run"), "--", probetest.Bin(t, "longrun"))
	run.Env = append(os.Environ(), "VRAMPROF_TRUTH="+filepath.Join(tmp, "truth.json"), "LONGRUN_MAX_SECONDS=20")
	run.Stderr = os.Stderr
	out, err := run.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, run.Start())
	t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
	buf := make([]byte, 64)
	n, err := out.Read(buf)
	require.NoError(t, err)
	line := strings.TrimSpace(string(buf[:n]))
	require.True(t, strings.HasPrefix(line, "ready "), "longrun's first line: %q", line)
	pid, err := strconv.Atoi(strings.TrimPrefix(line, "ready "))
	require.NoError(t, err)
	// Its own session: killing vramprof does not end it.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	r := vramprof(t, execOpts{dir: tmp}, "attach", "-p", strconv.Itoa(pid), "-o", filepath.Join(tmp, "second"))
	assert.Equal(t, exitToolError, r.code, "stderr:\n%s", r.stderr)
	assert.Contains(t, r.stderr, "vramprof pid "+strconv.Itoa(run.Process.Pid))

	// Phase 2, then out (longrun holds SIGTERM until phase 2 is done).
	require.NoError(t, syscall.Kill(pid, syscall.SIGUSR1))
	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	require.NoError(t, run.Wait())
}

// TestNoCallsSeenNote: an attach that probed the runtime but saw no call
// (longrun idles before SIGUSR1) says so in the summary and report.json.
func TestNoCallsSeenNote(t *testing.T) {
	probetest.RequirePrivilege(t)
	lr := startLongrun(t)
	a := startAttach(t, lr.pid, "--duration", "500ms")
	require.Equal(t, 0, a.wait(t, 15*time.Second), "stderr:\n%s", a.stderr.String())
	assert.Contains(t, a.stderr.String(), "note:               no calls seen: CUDA was loaded and probed")
	type noCalls struct {
		Run struct {
			Events      uint64 `json:"events"`
			NoCallsSeen bool   `json:"no_calls_seen"`
			Note        string `json:"note"`
		} `json:"run"`
	}
	rep := mustReadJSON[noCalls](t, filepath.Join(a.dir, "report.json"))
	assert.Zero(t, rep.Run.Events)
	assert.True(t, rep.Run.NoCallsSeen, "no_calls_seen")
	assert.Contains(t, rep.Run.Note, "no calls seen")

	// And not when calls were seen.
	lr2 := startLongrun(t)
	b := startAttach(t, lr2.pid)
	require.NoError(t, lr2.cmd.Process.Signal(syscall.SIGUSR1))
	lr2.expect(t, "done")
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, b.wait(t, 15*time.Second))
	assert.NotContains(t, b.stderr.String(), "no calls seen")
}
