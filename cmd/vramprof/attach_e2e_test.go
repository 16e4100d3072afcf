//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// syncBuffer is a bytes.Buffer safe for a writer and a poller at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startDaemon starts a long-running vramprof (attach --all, serve) with
// args and env added to this process's, and waits until its stderr holds
// ready. stop sends SIGTERM and requires a clean exit within 20 s. The
// stderr is logged when the test fails.
func startDaemon(t *testing.T, env []string, ready string, args ...string) (stderr *syncBuffer, stop func()) {
	t.Helper()
	stderr = &syncBuffer{}
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("vramprof %s's stderr:\n%s", args[0], stderr.String())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(stderr.String(), ready) {
		require.True(t, time.Now().Before(deadline), "vramprof %s not ready; stderr:\n%s", args[0], stderr.String())
		time.Sleep(20 * time.Millisecond)
	}
	return stderr, func() {
		t.Helper()
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-done:
			require.NoError(t, err, "stderr:\n%s", stderr.String())
		case <-time.After(20 * time.Second):
			t.Fatalf("vramprof %s did not stop on SIGTERM", args[0])
		}
	}
}

// longrun is a running testdata/build/bin/longrun.
type longrun struct {
	cmd   *exec.Cmd
	pid   int
	lines chan string // its stdout, line by line; closed at EOF
	truth string      // where it writes its truth
	exit  chan error  // cmd.Wait's result
}

// startLongrun starts longrun and waits for its `ready <pid>` line. It is
// killed at cleanup if still running.
func startLongrun(t *testing.T) *longrun {
	t.Helper()
	return startLongrunCmd(t, exec.Command(probetest.Bin(t, "longrun")))
}

// startLongrunCmd is startLongrun for a command that ends up running longrun
// in its own process (through exec: the `ready` pid must be cmd's).
func startLongrunCmd(t *testing.T, cmd *exec.Cmd) *longrun {
	t.Helper()
	lr := &longrun{
		truth: filepath.Join(t.TempDir(), "truth.json"),
		lines: make(chan string, 16),
		exit:  make(chan error, 1),
	}
	lr.cmd = cmd
	env := cmd.Env // the command's own additions, if any
	if env == nil {
		env = os.Environ()
	}
	env = append(env, "VRAMPROF_TRUTH="+lr.truth)
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "LONGRUN_MAX_SECONDS=") }) {
		env = append(env, "LONGRUN_MAX_SECONDS=20")
	}
	lr.cmd.Env = env
	lr.cmd.Stderr = os.Stderr
	out, err := lr.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, lr.cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lr.lines <- sc.Text()
		}
		close(lr.lines)
		lr.exit <- lr.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = lr.cmd.Process.Kill()
		for range lr.lines {
		}
	})
	line := lr.expect(t, "ready")
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "ready")))
	require.NoError(t, err, "ready line %q", line)
	require.Equal(t, lr.cmd.Process.Pid, pid)
	lr.pid = pid
	return lr
}

// expect waits for a stdout line starting with prefix and returns it.
func (lr *longrun) expect(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-lr.lines:
			require.True(t, ok, "longrun ended before printing %q", prefix)
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("longrun did not print %q", prefix)
		}
	}
}

// attachment is a `vramprof attach` running in the background.
type attachment struct {
	cmd    *exec.Cmd
	dir    string
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// startAttach runs `vramprof attach -p PID -o DIR extra...` and waits until
// the attach is live: the trace exists and the "tracing pid" line is out.
func startAttach(t *testing.T, pid int, extra ...string) *attachment {
	t.Helper()
	return startAttachIn(t, "", pid, extra...)
}

// startAttachIn is startAttach with the default output directory in cwd
// (no -o); with cwd "", it is startAttach.
func startAttachIn(t *testing.T, cwd string, pid int, extra ...string) *attachment {
	t.Helper()
	a := &attachment{stderr: &syncBuffer{}, done: make(chan struct{})}
	args := []string{"attach", "-p", strconv.Itoa(pid)}
	if cwd == "" {
		a.dir, cwd = filepath.Join(t.TempDir(), "out"), t.TempDir()
		args = append(args, "-o", a.dir)
	}
	a.cmd = exec.Command(binPath, append(args, extra...)...)
	a.cmd.Stderr = a.stderr
	a.cmd.Dir = cwd
	require.NoError(t, a.cmd.Start())
	go func() { a.err = a.cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		_ = a.cmd.Process.Kill()
		<-a.done
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		trace := filepath.Join(a.dir, "trace.vpt")
		if a.dir == "" {
			m, _ := filepath.Glob(filepath.Join(cwd, "vramprof-*", "trace.vpt"))
			if len(m) == 1 {
				trace = m[0]
			}
		}
		_, statErr := os.Stat(trace)
		if statErr != nil { // a flight recorder's (--max-trace) first segment
			_, statErr = os.Stat(filepath.Join(filepath.Dir(trace), "trace-000001.vpt"))
		}
		if statErr == nil && strings.Contains(a.stderr.String(), "tracing pid "+strconv.Itoa(pid)) {
			a.dir = filepath.Dir(trace)
			return a
		}
		select {
		case <-a.done:
			t.Fatalf("vramprof attach ended before it was live: %v\n%s", a.err, a.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "attach not live after 15 s; stderr:\n%s", a.stderr.String())
	}
}

// wait waits for vramprof to end by itself and returns its exit code.
func (a *attachment) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(within):
		t.Fatalf("vramprof attach still running after %s; stderr:\n%s", within, a.stderr.String())
	}
	if a.err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, a.err, &ee, "wait")
		return ee.ExitCode()
	}
	return 0
}

// TestAttach attaches to longrun between its two phases and compares what
// vramprof saw of phase 2 with longrun's truth, for each way an attach ends.
func TestAttach(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name   string
		stop   func(t *testing.T, lr *longrun, a *attachment)
		reason string
	}{
		{
			name:   "sigterm",
			reason: "interrupted",
			stop: func(t *testing.T, lr *longrun, a *attachment) {
				require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
			},
		},
		{
			name:   "target_exits",
			reason: "target exited",
			stop: func(t *testing.T, lr *longrun, a *attachment) {
				require.NoError(t, lr.cmd.Process.Signal(syscall.SIGTERM))
				select {
				case err := <-lr.exit:
					require.NoError(t, err, "longrun exits 0 on SIGTERM")
				case <-time.After(10 * time.Second):
					t.Fatal("longrun did not exit on SIGTERM")
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lr := startLongrun(t)
			a := startAttach(t, lr.pid)
			require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
			lr.expect(t, "done")
			tc.stop(t, lr, a)
			require.Equal(t, 0, a.wait(t, 20*time.Second), "exit code; stderr:\n%s", a.stderr.String())
			assertDirHolds(t, a.dir, outputFiles)

			truth := probetest.MustReadTruth(t, lr.truth)
			require.NotNil(t, truth.Preexisting, "longrun's truth has preexisting")
			rep := mustReadReport(t, filepath.Join(a.dir, "report.json"))
			assert.Equal(t, "vramprof/report/v1", rep.Schema)
			tt, want := rep.Totals, truth.Totals
			assert.Equal(t, want.Allocations, val(t, "allocations", tt.Allocations), "allocations")
			assert.Equal(t, want.Frees, val(t, "frees", tt.Frees), "frees")
			assert.Equal(t, uint64(1), want.UnknownFrees, "truth: one preloaded buffer freed")
			assert.Equal(t, want.UnknownFrees, val(t, "unknown_frees", tt.UnknownFrees), "unknown_frees")
			assert.Equal(t, want.AllocatedBytes, val(t, "allocated_bytes", tt.AllocatedBytes), "allocated_bytes")
			assert.Equal(t, want.LiveBytesAtEnd, val(t, "live_bytes_at_end", tt.LiveBytesAtEnd), "live_bytes_at_end")
			assert.Equal(t, want.PeakBytes, val(t, "peak_bytes", tt.PeakBytes), "peak_bytes")
			assert.Zero(t, val(t, "lost_events", tt.LostEvents), "lost_events")
			assert.Equal(t, "attach", rep.Run.Mode)
			assert.Equal(t, tc.reason, rep.Run.EndReason, "end_reason")
			assert.True(t, rep.Run.EndedCleanly, "ended_cleanly")

			// longrun held memory before the attach (its truth's
			// preexisting): the recording is no whole run, and a gate
			// gives no verdict on it, even at 1 GiB over the truth's
			// peak.
			reason := fmt.Sprintf("attached mid-run: process %d was running before tracing began", lr.pid)
			cr := mustReadJSON[completeReport](t, filepath.Join(a.dir, "report.json"))
			require.NotNil(t, cr.Run.Complete, "report.json run.complete")
			assert.False(t, *cr.Run.Complete, "an attach recording is not complete")
			require.Len(t, cr.Run.IncompleteReasons, 1)
			assert.Contains(t, cr.Run.IncompleteReasons[0], reason)
			checkUnknown(t, reason, "--max-peak", strconv.FormatUint(want.PeakBytes+1<<30, 10), a.dir)
		})
	}

	t.Run("duration", func(t *testing.T) {
		t.Parallel()
		lr := startLongrun(t)
		start := time.Now()
		a := startAttach(t, lr.pid, "--duration", "1s")
		require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
		require.Equal(t, 0, a.wait(t, 15*time.Second), "exit code; stderr:\n%s", a.stderr.String())
		assert.GreaterOrEqual(t, time.Since(start), time.Second, "stopped before --duration")
		assertDirHolds(t, a.dir, outputFiles)
		rep := mustReadReport(t, filepath.Join(a.dir, "report.json"))
		assert.Equal(t, "duration", rep.Run.EndReason, "end_reason")
		assert.True(t, rep.Run.EndedCleanly, "ended_cleanly")
		// Phase 2 takes about half a second, so 1 s saw all or most of it:
		// never more than the truth.
		lr.expect(t, "done")
		truth := probetest.MustReadTruth(t, lr.truth)
		assert.LessOrEqual(t, val(t, "allocations", rep.Totals.Allocations), truth.Totals.Allocations)
		assert.LessOrEqual(t, val(t, "allocated_bytes", rep.Totals.AllocatedBytes), truth.Totals.AllocatedBytes)
		assert.Positive(t, val(t, "allocations", rep.Totals.Allocations), "saw phase 2")
	})
}

// TestAttachTargetKilled: attach is not its target's parent, yet a target
// killed by SIGKILL is reported as such (before: "target exited, exit code
// 0"), from the exit tracepoint's status; a clean exit keeps its code.
func TestAttachTargetKilled(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name   string
		sig    syscall.Signal
		reason string
		code   int
	}{
		{"sigkill", syscall.SIGKILL, "target killed by signal 9 (SIGKILL)", 137},
		{"sigterm_exit_0", syscall.SIGTERM, "target exited", 0}, // longrun exits 0 on SIGTERM
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lr := startLongrun(t)
			a := startAttach(t, lr.pid)
			require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
			lr.expect(t, "done")
			require.NoError(t, lr.cmd.Process.Signal(tc.sig))
			require.Equal(t, 0, a.wait(t, 20*time.Second), "exit code; stderr:\n%s", a.stderr.String())
			rep := mustReadReport(t, filepath.Join(a.dir, "report.json"))
			assert.Equal(t, tc.reason, rep.Run.EndReason, "end_reason")
			assert.Equal(t, tc.code, rep.Run.ExitCode, "exit_code")
			assert.Contains(t, a.stderr.String(), fmt.Sprintf("%s, exit code %d", tc.reason, tc.code), "summary")
		})
	}
}
