//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
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

// A command run under vramprof must not notice it: it starts with the
// signal dispositions and mask it would have had without vramprof, and
// gets only the signals a shell would deliver to it. These tests run each
// command natively and under `vramprof run` behind the same wrapper, and
// compare.

// signalWrapper is what starts vramprof (or, natively, the command): a
// parent that ignores or blocks signals.
type signalWrapper struct {
	name string
	argv []string // the command follows
	// ignored are signals the wrapper makes the command ignore: the
	// native run must show them, or the comparison proves nothing.
	ignored []syscall.Signal
	blocked []syscall.Signal
}

// signalWrappers are the parents a user's shell provides. env's
// --ignore-signal and --block-signal (coreutils 9.1+) set any disposition
// and mask; nohup ignores SIGHUP; a non-interactive shell ignores SIGINT
// and SIGQUIT in a background job.
var signalWrappers = []signalWrapper{
	{
		name:    "env",
		argv:    []string{"env", "--ignore-signal=PIPE,USR2,CHLD,URG", "--block-signal=USR1,TERM,INT,CHLD", "--"},
		ignored: []syscall.Signal{syscall.SIGPIPE, syscall.SIGUSR2, syscall.SIGCHLD, syscall.SIGURG},
		blocked: []syscall.Signal{syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD},
	},
	{name: "nohup", argv: []string{"nohup"}, ignored: []syscall.Signal{syscall.SIGHUP}},
	{name: "background", argv: []string{"sh", "-c", `"$@" & wait $!`, "sh"}, ignored: []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT}},
}

// requireEnvSignals fails (skips outside CI) when env cannot set signal
// dispositions.
func requireEnvSignals(t *testing.T) {
	t.Helper()
	if err := exec.Command("env", "--ignore-signal=PIPE", "--block-signal=USR1", "true").Run(); err != nil {
		msg := "needs env --ignore-signal and --block-signal (GNU coreutils 9.1+): " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// statusSignals returns the SigIgn and SigBlk lines of a /proc/PID/status.
func statusSignals(t *testing.T, status string) (ign, blk uint64) {
	t.Helper()
	found := 0
	for _, l := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(l, ":\t")
		if !ok || (k != "SigIgn" && k != "SigBlk") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		require.NoError(t, err, "%s", l)
		if k == "SigIgn" {
			ign = n
		} else {
			blk = n
		}
		found++
	}
	require.Equal(t, 2, found, "SigIgn and SigBlk in:\n%s", status)
	return ign, blk
}

func sigBit(s syscall.Signal) uint64 { return 1 << (uint(s) - 1) }

// TestRunKeepsSignalDispositions: `cat /proc/self/status` shows the same
// ignored and blocked signals under `vramprof run` as natively, behind each
// wrapper. (vramprof's Go runtime handles nearly every signal, and exec
// resets a handled signal to its default: the command used to start with
// SigIgn 0, and with SIGINT, SIGTERM and SIGCHLD unblocked.)
func TestRunKeepsSignalDispositions(t *testing.T) {
	probetest.RequirePrivilege(t)
	requireEnvSignals(t)
	status := []string{"cat", "/proc/self/status"}
	for _, w := range signalWrappers {
		t.Run(w.name, func(t *testing.T) {
			tmp := t.TempDir()
			native, err := exec.Command(w.argv[0], append(w.argv[1:], status...)...).Output()
			require.NoError(t, err)
			args := append(append(w.argv[1:], binPath, "run", "-q", "-o", filepath.Join(tmp, "out"), "--"), status...)
			cmd := exec.Command(w.argv[0], args...)
			cmd.Dir = tmp
			var stderr syncBuffer
			cmd.Stderr = &stderr
			traced, err := cmd.Output()
			require.NoError(t, err, "vramprof run; stderr:\n%s", stderr.String())

			nIgn, nBlk := statusSignals(t, string(native))
			for _, s := range w.ignored {
				require.NotZero(t, nIgn&sigBit(s), "natively %v is ignored (SigIgn %#x)", s, nIgn)
			}
			for _, s := range w.blocked {
				require.NotZero(t, nBlk&sigBit(s), "natively %v is blocked (SigBlk %#x)", s, nBlk)
			}
			tIgn, tBlk := statusSignals(t, string(traced))
			assert.Equal(t, fmt.Sprintf("%#x", nIgn), fmt.Sprintf("%#x", tIgn), "SigIgn under vramprof (natively)")
			assert.Equal(t, fmt.Sprintf("%#x", nBlk), fmt.Sprintf("%#x", tBlk), "SigBlk under vramprof (natively)")
		})
	}
}

// exitCode is a finished command's exit code as a shell gives it.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// TestRunIgnoredSIGPIPE: with SIGPIPE ignored by the parent (a shell's
// trap "" PIPE), a writer whose reader goes away gets EPIPE and exits with its
// own code (yes: 1), natively and under vramprof; it used to be killed by
// SIGPIPE under vramprof (141).
func TestRunIgnoredSIGPIPE(t *testing.T) {
	probetest.RequirePrivilege(t)
	requireEnvSignals(t)
	writer := func(argv ...string) int {
		cmd := exec.Command("env", append([]string{"--ignore-signal=PIPE", "--"}, argv...)...)
		cmd.Dir = t.TempDir()
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		// head -c10
		_, err = io.ReadFull(out, make([]byte, 10))
		require.NoError(t, err)
		require.NoError(t, out.Close())
		return exitCode(t, cmd.Wait())
	}
	native := writer("yes")
	require.Equal(t, 1, native, "natively yes ends on EPIPE with its own code")
	traced := writer(binPath, "run", "-q", "-o", "out", "--", "yes")
	assert.Equal(t, native, traced, "the command's exit code under vramprof (natively %d)", native)
}

// TestRunIgnoredSignalsNotDelivered: a signal the parent ignored (nohup's
// SIGHUP; SIGINT and SIGQUIT in a background job) sent both to vramprof and
// to the command kills neither: vramprof does not pass it on and the
// command ignores it, as it does natively. longrun is then asked to finish
// (SIGUSR1, then SIGTERM to the top process: vramprof passes that on) and
// must exit as natively: 0, its truth written. Before, the command died of
// the signal (129, 130, 131).
func TestRunIgnoredSignalsNotDelivered(t *testing.T) {
	probetest.RequirePrivilege(t)
	bin := probetest.Bin(t, "longrun")
	for _, w := range signalWrappers[1:] {
		t.Run(w.name, func(t *testing.T) {
			native := runIgnoring(t, w, bin, false)
			require.Equal(t, 0, native, "natively longrun ignores %v and exits 0", w.ignored)
			traced := runIgnoring(t, w, bin, true)
			assert.Equal(t, native, traced, "exit code under vramprof (natively %d)", native)
		})
	}
}

// runIgnoring runs longrun behind w (under vramprof when traced), sends
// w.ignored to the process w started and to longrun, lets longrun finish
// and returns the exit code w's process ended with.
func runIgnoring(t *testing.T, w signalWrapper, bin string, traced bool) int {
	t.Helper()
	tmp := t.TempDir()
	args := w.argv[1:]
	if traced {
		args = append(args, binPath, "run", "-q", "-o", filepath.Join(tmp, "out"), "--")
	}
	cmd := exec.Command(w.argv[0], append(args, bin)...)
	cmd.Dir = tmp
	truth := filepath.Join(tmp, "truth.json")
	cmd.Env = append(os.Environ(), "VRAMPROF_TRUTH="+truth, "LONGRUN_MAX_SECONDS=20", "LONGRUN_PAUSE_MS=0")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "longrun's ready line; stderr:\n%s", stderr.String())
	pid, err := strconv.Atoi(strings.TrimPrefix(lines.Text(), "ready "))
	require.NoError(t, err, "ready line %q", lines.Text())
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	// The process the user would signal: vramprof (longrun's parent), or
	// natively longrun itself.
	top := pid
	if traced {
		top = procPPID(t, pid)
	}
	for _, s := range w.ignored {
		require.NoError(t, syscall.Kill(top, s))
		// Natively ignored: if it is not, it is fatal (longrun neither
		// handles nor blocks it), and pending before anything below.
		require.NoError(t, syscall.Kill(pid, s))
	}
	require.NoError(t, syscall.Kill(pid, syscall.SIGUSR1))
	if lines.Scan() && lines.Text() == "done" {
		require.NoError(t, syscall.Kill(top, syscall.SIGTERM))
		_, terr := probetest.ReadTruth(truth)
		assert.NoError(t, terr, "longrun's truth")
	}
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not end; stderr:\n%s", w.name, stderr.String())
	}
	return exitCode(t, err)
}

// procPPID is the parent PID of /proc/PID/stat (field 4).
func procPPID(t *testing.T, pid int) int { return procStatInt(t, pid, 1) }

// TestRunSignalledAtStart sends SIGTERM to `vramprof run` at points of its
// start-up, while the probes are set up (about a second): the command must
// not run on as if nothing had been said. Caught before run's own handler,
// the signal once reached only main's context, and the command ran its full
// 30 s; now it is not started (exit 143, one line), and after the handler
// it is passed on to the command (143, as it dies of it).
func TestRunSignalledAtStart(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, delay := range []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second} {
		t.Run(delay.String(), func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			cmd := exec.Command(binPath, "run", "-q", "-o", filepath.Join(t.TempDir(), "out"), "--",
				"/bin/sh", "-c", `touch "$1"; exec sleep 30`, "sh", marker)
			var stderr syncBuffer
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			time.Sleep(delay) // the point of start-up the signal lands at
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatalf("vramprof run still runs 15 s after SIGTERM (sent %v after its start); stderr:\n%s", delay, stderr.String())
			}
			// 143 either way: not started (one line says so), or started and
			// killed by the signal passed on (possibly before its first line).
			assert.Equal(t, 143, cmd.ProcessState.ExitCode(), "exit code; stderr:\n%s", stderr.String())
			if strings.Contains(stderr.String(), "nothing was run") {
				_, err := os.Stat(marker)
				assert.True(t, os.IsNotExist(err), "said not started, but the command ran")
			}
		})
	}
}
