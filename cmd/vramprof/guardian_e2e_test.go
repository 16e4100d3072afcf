//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
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

// dieAtStopEnv is the session's test hook (probes/session.go, dieAtStop):
// vramprof SIGKILLs itself when it reads its Nth stop record, the target
// still stopped.
const dieAtStopEnv = "VRAMPROF_TEST_DIE_AT_STOP"

// maxStops bounds the stop points a scenario is expected to have.
const maxStops = 40

// wrappedScript is a shell script that runs bin ($0) and writes its exit
// code to $VRAMPROF_TEST_CODE: the target's own exit code, readable after
// vramprof (its parent in run mode) died. It adds stop points of its own:
// the shell's start-up, and the exec of bin in a forked child.
const wrappedScript = `"$0"; echo $? > "$VRAMPROF_TEST_CODE"`

// awaitTargetEnd waits until the wrapper wrote the target's exit code and
// returns it.
func awaitTargetEnd(t *testing.T, codeFile string, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if b, err := os.ReadFile(codeFile); err == nil && strings.HasSuffix(string(b), "\n") {
			code, err := strconv.Atoi(strings.TrimSpace(string(b)))
			require.NoError(t, err)
			return code
		}
		require.True(t, time.Now().Before(deadline), "the target did not finish within %s: left stopped?%s", within, stoppedNote(t))
		time.Sleep(20 * time.Millisecond)
	}
}

// stoppedNote lists the processes in state T (stopped), for a failure
// message.
func stoppedNote(t *testing.T) string {
	out, _ := exec.Command("ps", "-eo", "pid,ppid,stat,args").Output()
	var b strings.Builder
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 2 && strings.HasPrefix(f[2], "T") {
			b.WriteString("\n  " + l)
		}
	}
	return b.String()
}

// killedBySIGKILL reports whether a vramprof that ended with err was the
// test hook's doing.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// TestRunKilledAtEveryStop kills `vramprof run` at each stop point of a
// scenario in turn (the Nth stop record, for N = 1, 2, ... until a run
// ends without reaching N): the exec of the target, each change of its
// link map at start-up and at every dlopen and dlclose, the execs of a
// launcher's ranks. Each time, the target, stopped and waiting for
// vramprof, must be resumed by the guardian, and finish: exit code 0, its
// truth written.
func TestRunKilledAtEveryStop(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, name := range []string{"dlopen_runtime", "reload", "launcher", "static_runtime"} {
		t.Run(name, func(t *testing.T) {
			bin := probetest.Bin(t, name)
			stops := 0
			for n := 1; n <= maxStops; n++ {
				tmp := t.TempDir()
				codeFile, truthFile := filepath.Join(tmp, "code"), filepath.Join(tmp, "truth.json")
				cmd := exec.Command(binPath, "run", "-q", "-o", filepath.Join(tmp, "out"), "--", "sh", "-c", wrappedScript, bin)
				cmd.Env = append(os.Environ(), dieAtStopEnv+"="+strconv.Itoa(n), "VRAMPROF_TRUTH="+truthFile, "VRAMPROF_TEST_CODE="+codeFile)
				cmd.Dir = tmp
				// A session of its own: the processes vramprof leaves behind
				// then go to a reaper outside their session (as from a
				// terminal's shell, whatever reaper this test runs under),
				// so that, without care, the command's process group would be
				// orphaned with a stopped member when vramprof dies, and get
				// SIGHUP.
				cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
				var stderr syncBuffer
				cmd.Stderr = &stderr
				// The command inherits vramprof's stderr: a target left
				// stopped would hold the pipe open and Run would wait for
				// ever. Bounded, so that awaitTargetEnd reports it.
				cmd.WaitDelay = 10 * time.Second
				err := cmd.Run()
				code := awaitTargetEnd(t, codeFile, 20*time.Second)
				assert.Equal(t, 0, code, "target's exit code, vramprof killed at stop %d", n)
				truth, terr := probetest.ReadTruth(truthFile)
				if assert.NoError(t, terr, "target's truth, vramprof killed at stop %d", n) {
					assert.Equal(t, name, truth.Scenario, "truth's scenario")
				}
				if !killedBySIGKILL(err) {
					// Fewer than n stops: each one was tried.
					require.NoError(t, err, "vramprof run, stop %d; stderr:\n%s", n, stderr.String())
					break
				}
				assert.Contains(t, stderr.String(), "resumed it", "the guardian's note, stop %d", n)
				stops = n
			}
			require.Less(t, stops, maxStops, "more stops than expected")
			// The shell's start-up and the exec of the scenario at least.
			assert.GreaterOrEqual(t, stops, 3, "stop points")
			t.Logf("%s: vramprof killed at each of %d stop points: target exit 0 and truth written each time", name, stops)
		})
	}
}

// TestAttachKilledAtEveryStop is TestRunKilledAtEveryStop for `attach
// --wait`: a shell waits for a line on its stdin, then execs dlopen_runtime
// (the exec, the loader at start-up and the dlopen of the runtime, all
// after the attach). The shell is this test's child: its exit code is the
// scenario's.
func TestAttachKilledAtEveryStop(t *testing.T) {
	probetest.RequirePrivilege(t)
	bin := probetest.Bin(t, "dlopen_runtime")
	stops := 0
	for n := 1; n <= maxStops; n++ {
		tmp := t.TempDir()
		truthFile := filepath.Join(tmp, "truth.json")
		target := exec.Command("sh", "-c", `read x; exec "$0"`, bin)
		target.Env = append(os.Environ(), "VRAMPROF_TRUTH="+truthFile)
		in, err := target.StdinPipe()
		require.NoError(t, err)
		target.Stderr = os.Stderr
		require.NoError(t, target.Start())
		exited := make(chan error, 1)
		go func() { exited <- target.Wait() }()
		t.Cleanup(func() { _ = target.Process.Kill() })

		cmd := exec.Command(binPath, "attach", "--wait", "-p", strconv.Itoa(target.Process.Pid), "-o", filepath.Join(tmp, "out"))
		cmd.Env = append(os.Environ(), dieAtStopEnv+"="+strconv.Itoa(n))
		cmd.Dir = tmp
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		var lines []string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), "watching pid") {
				break
			}
		}
		rest := make(chan []string, 1)
		go func() {
			var more []string
			for sc.Scan() {
				more = append(more, sc.Text())
			}
			rest <- more
		}()
		_, err = fmt.Fprintln(in, "go")
		require.NoError(t, err)
		require.NoError(t, in.Close())

		select {
		case err := <-exited:
			assert.NoError(t, err, "target's exit, vramprof killed at stop %d", n)
		case <-time.After(20 * time.Second):
			t.Fatalf("the target did not finish within 20 s, vramprof killed at stop %d: left stopped?%s", n, stoppedNote(t))
		}
		_, terr := probetest.ReadTruth(truthFile)
		assert.NoError(t, terr, "target's truth, vramprof killed at stop %d", n)
		lines = append(lines, <-rest...)
		err = cmd.Wait()
		if !killedBySIGKILL(err) {
			require.NoError(t, err, "vramprof attach, stop %d; stderr:\n%s", n, strings.Join(lines, "\n"))
			break
		}
		assert.Contains(t, strings.Join(lines, "\n"), "resumed it", "the guardian's note, stop %d", n)
		stops = n
	}
	require.Less(t, stops, maxStops, "more stops than expected")
	// The exec, the loader's start-up, the dlopen.
	assert.GreaterOrEqual(t, stops, 3, "stop points")
	t.Logf("vramprof attach killed at each of %d stop points: target exit 0 and truth written each time", stops)
}

// TestUserStoppedStaysStopped: a process the user stopped (SIGSTOP, Ctrl-Z)
// before the attach is not vramprof's to resume, whether vramprof ends
// normally or is killed.
func TestUserStoppedStaysStopped(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{{"sigterm", syscall.SIGTERM}, {"sigkill", syscall.SIGKILL}} {
		t.Run(tc.name, func(t *testing.T) {
			lr := startLongrun(t)
			require.NoError(t, syscall.Kill(lr.pid, syscall.SIGSTOP))
			waitState(t, lr.pid, 'T')
			a := startAttach(t, lr.pid)
			var gs []int
			require.Eventually(t, func() bool { gs = guardians(t, a.cmd.Process.Pid); return len(gs) > 0 },
				10*time.Second, 10*time.Millisecond, "the session's guardian")
			require.NoError(t, a.cmd.Process.Signal(tc.sig))
			<-a.done
			for _, g := range gs { // its last look at the stopped map done
				awaitGone(t, g)
			}
			assert.Equal(t, byte('T'), procState(t, lr.pid), "left stopped")
			require.NoError(t, syscall.Kill(lr.pid, syscall.SIGCONT))
		})
	}
}

// procStat is /proc/PID/stat's fields after the command's name: state,
// ppid, pgrp, session, ... (fields 3 on, proc(5)'s numbering); an error
// when pid is gone.
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 4 {
		return nil, fmt.Errorf("/proc/%d/stat: %q: not a stat line", pid, s)
	}
	return f, nil
}

// procStatInt is field i of procStat (0: state) as a number.
func procStatInt(t *testing.T, pid, i int) int {
	t.Helper()
	f, err := procStat(pid)
	require.NoError(t, err)
	n, err := strconv.Atoi(f[i])
	require.NoError(t, err)
	return n
}

// procSession is the session ID of /proc/PID/stat (field 6).
func procSession(t *testing.T, pid int) int { return procStatInt(t, pid, 3) }

// procState is the state letter of /proc/PID/stat.
func procState(t *testing.T, pid int) byte {
	t.Helper()
	f, err := procStat(pid)
	require.NoError(t, err)
	return f[0][0]
}

// waitState waits until pid is in state st.
func waitState(t *testing.T, pid int, st byte) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for procState(t, pid) != st {
		require.True(t, time.Now().Before(deadline), "pid %d never reached state %c", pid, st)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunForwardsSignals: `run`'s command has a session of its own (so that
// vramprof's death cannot get it a SIGHUP), so vramprof passes the
// terminal's signals on to it: Ctrl-C or a hang-up sent to vramprof ends
// the command (longrun does not handle them), and vramprof exits with its
// code, outputs written.
func TestRunForwardsSignals(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			tmp := t.TempDir()
			dir := filepath.Join(tmp, "out")
			cmd := exec.Command(binPath, "run", "-q", "-o", dir, "--", probetest.Bin(t, "longrun"))
			cmd.Env = append(os.Environ(), "VRAMPROF_TRUTH="+filepath.Join(tmp, "truth.json"), "LONGRUN_MAX_SECONDS=20")
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			// vramprof as a terminal's foreground job starts it: sig not
			// ignored, whatever this test inherited (under nohup, SIGHUP
			// is ignored, and vramprof and its command keep it so).
			stop := catchSignal(sig)
			require.NoError(t, cmd.Start())
			stop()
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			buf := make([]byte, 64)
			n, err := out.Read(buf) // "ready <pid>"
			require.NoError(t, err)
			pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(buf[:n]), "ready ")))
			require.NoError(t, err)
			// The kernel sends SIGHUP to an orphaned process group with a
			// stopped member only within a session: the guardian may win
			// that race, but the command must not depend on it.
			assert.Equal(t, pid, procSession(t, pid), "the command leads a session of its own")
			require.NoError(t, cmd.Process.Signal(sig))
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("vramprof run did not end after %v", sig)
			}
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, 128+int(sig), ee.ExitCode(), "the command's code: killed by %v", sig)
			rep := mustReadReport(t, filepath.Join(dir, "report.json"))
			assert.Equal(t, "signal: "+sig.String(), rep.Run.EndReason)
		})
	}
}

// catchSignal has this process catch sig until stop is called, so that a
// child started meanwhile starts with sig's default action (the kernel
// resets caught signals at exec), even when this process inherited sig
// ignored (nohup's SIGHUP, a background job's SIGINT). After stop, sig is
// as it was.
func catchSignal(sig syscall.Signal) (stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, sig)
	return func() { signal.Stop(c) }
}
