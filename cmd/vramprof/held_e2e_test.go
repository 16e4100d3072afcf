//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// holdAtStopEnv is the session's test hook (probes/session.go,
// holdAtStop): vramprof holds its first stopped process until the test
// lets it go.
const holdAtStopEnv = "VRAMPROF_TEST_HOLD_AT_STOP"

// heldRun is a `vramprof run` holding a process stopped at its first stop.
type heldRun struct {
	cmd    *exec.Cmd
	done   chan error // cmd.Wait's result
	stderr *syncBuffer
	dir    string // the hook's directory
	pid    int    // the process held stopped
	out    string // vramprof's output directory
}

// startHeldAtStop starts `vramprof run` on argv with the hold hook and waits until
// it holds a process stopped.
func startHeldAtStop(t *testing.T, env []string, argv ...string) *heldRun {
	t.Helper()
	tmp := t.TempDir()
	h := &heldRun{dir: filepath.Join(tmp, "hold"), out: filepath.Join(tmp, "out"), stderr: &syncBuffer{}, done: make(chan error, 1)}
	require.NoError(t, os.Mkdir(h.dir, 0o755))
	require.NoError(t, syscall.Mkfifo(filepath.Join(h.dir, "release"), 0o600))
	h.cmd = exec.Command(binPath, append([]string{"run", "-q", "-o", h.out, "--"}, argv...)...)
	h.cmd.Env = append(append(os.Environ(), holdAtStopEnv+"="+h.dir), env...)
	h.cmd.Dir = tmp
	// A session of its own, as in TestRunKilledAtEveryStop.
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	h.cmd.Stderr = h.stderr
	h.cmd.WaitDelay = 10 * time.Second
	require.NoError(t, h.cmd.Start())
	go func() { h.done <- h.cmd.Wait() }()
	t.Cleanup(func() {
		_ = h.cmd.Process.Kill()
		if h.pid > 0 {
			_ = syscall.Kill(h.pid, syscall.SIGCONT)
		}
		if t.Failed() {
			t.Logf("vramprof's stderr:\n%s", h.stderr.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(h.dir, "held")); err == nil {
			h.pid, err = strconv.Atoi(string(b))
			require.NoError(t, err)
			break
		}
		require.True(t, time.Now().Before(deadline), "vramprof never held a process; stderr:\n%s", h.stderr.String())
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, byte('T'), procState(t, h.pid), "the held process is stopped")
	return h
}

// release lets vramprof go on from its hold.
func (h *heldRun) release(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(h.dir, "release"), os.O_WRONLY, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// awaitHandled waits until vramprof has dealt with the held stop (resumed
// the process or left it), or has exited.
func (h *heldRun) awaitHandled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(h.dir, "handled")); err == nil {
			return
		}
		select {
		case err := <-h.done:
			h.done <- err
			return
		default:
		}
		require.True(t, time.Now().Before(deadline), "vramprof never handled the held stop")
		time.Sleep(10 * time.Millisecond)
	}
}

// guardians returns the PIDs of the guardian processes whose parent is
// ppid.
func guardians(t *testing.T, ppid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := procStat(pid)
		if err != nil || f[0] == "Z" || f[1] != strconv.Itoa(ppid) {
			continue
		}
		if cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.HasPrefix(string(cl), "vramprof-guardian\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// awaitGone waits until pid has exited (gone, or a zombie).
func awaitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if f, err := procStat(pid); err != nil || f[0] == "Z" {
			return
		}
		require.True(t, time.Now().Before(deadline), "pid %d never exited", pid)
		time.Sleep(10 * time.Millisecond)
	}
}

// stopPending reports whether a SIGSTOP waits in pid's queue (ShdPnd): a
// user's stop sent while the process was stopped already, which a SIGCONT
// would discard.
func stopPending(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "ShdPnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			require.NoError(t, err)
			return n&sigBit(syscall.SIGSTOP) != 0
		}
	}
	t.Fatalf("no ShdPnd in /proc/%d/status", pid)
	return false
}

// TestUserStopAtDlopenStop: the user sends SIGSTOP to a process vramprof
// holds stopped at a library load. vramprof must not resume it (its SIGCONT
// used to discard the user's stop, and the target ran on): the process
// stays stopped, the user's stop still pending, until the user's SIGCONT;
// then it runs to its end, traced: vramprof's figures equal its truth.
func TestUserStopAtDlopenStop(t *testing.T) {
	probetest.RequirePrivilege(t)
	truthFile := filepath.Join(t.TempDir(), "truth.json")
	h := startHeldAtStop(t, []string{"VRAMPROF_TRUTH=" + truthFile}, probetest.Bin(t, "dlopen_runtime"))
	require.NoError(t, syscall.Kill(h.pid, syscall.SIGSTOP))
	h.release(t)
	h.awaitHandled(t)
	assert.True(t, stopPending(t, h.pid), "the user's SIGSTOP is still pending (not discarded by a SIGCONT)")
	assert.Equal(t, byte('T'), procState(t, h.pid), "left stopped")

	require.NoError(t, syscall.Kill(h.pid, syscall.SIGCONT))
	select {
	case err := <-h.done:
		require.NoError(t, err, "vramprof run; stderr:\n%s", h.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("vramprof run did not end after the user's SIGCONT%s", stoppedNote(t))
	}
	truth := probetest.MustReadTruth(t, truthFile)
	rep := mustReadReport(t, filepath.Join(h.out, "report.json"))
	require.NotNil(t, rep.Totals.Allocations)
	assert.Equal(t, truth.Totals.Allocations, *rep.Totals.Allocations, "allocations")
	assert.Equal(t, truth.Totals.LiveBytesAtEnd, *rep.Totals.LiveBytesAtEnd, "live bytes at end")
}

// TestUserStopSurvivesGuardian: as TestUserStopAtDlopenStop, but vramprof
// is killed while it holds the process: the guardian resumes what vramprof
// stopped, not what the user stopped. After the guardian has exited, the
// process is still stopped; the user's SIGCONT lets it finish (exit 0).
func TestUserStopSurvivesGuardian(t *testing.T) {
	probetest.RequirePrivilege(t)
	tmp := t.TempDir()
	codeFile := filepath.Join(tmp, "code")
	h := startHeldAtStop(t, []string{"VRAMPROF_TRUTH=" + filepath.Join(tmp, "truth.json"), "VRAMPROF_TEST_CODE=" + codeFile},
		"sh", "-c", wrappedScript, probetest.Bin(t, "dlopen_runtime"))
	g := guardians(t, h.cmd.Process.Pid)
	require.Len(t, g, guardianCount, "vramprof's guardians")
	require.NoError(t, syscall.Kill(h.pid, syscall.SIGSTOP))
	require.NoError(t, h.cmd.Process.Kill())
	for _, p := range g {
		awaitGone(t, p)
	}
	assert.True(t, stopPending(t, h.pid), "the user's SIGSTOP is still pending")
	assert.Equal(t, byte('T'), procState(t, h.pid), "left stopped by the guardian")
	require.NoError(t, syscall.Kill(h.pid, syscall.SIGCONT))
	assert.Equal(t, 0, awaitTargetEnd(t, codeFile, 20*time.Second), "the target's exit code")
}

// guardianCount is how many guardians a session keeps running
// (probes/guardian.go).
const guardianCount = 2

// TestGuardianDiesFirst: a guardian is killed while vramprof holds a
// process stopped; vramprof starts another at once; vramprof is then killed
// too, and the guardians resume the process, which finishes (exit 0, truth
// written). Before, nobody was left to resume it: it stayed in state T for
// ever.
func TestGuardianDiesFirst(t *testing.T) {
	probetest.RequirePrivilege(t)
	tmp := t.TempDir()
	codeFile, truthFile := filepath.Join(tmp, "code"), filepath.Join(tmp, "truth.json")
	h := startHeldAtStop(t, []string{"VRAMPROF_TRUTH=" + truthFile, "VRAMPROF_TEST_CODE=" + codeFile},
		"sh", "-c", wrappedScript, probetest.Bin(t, "dlopen_runtime"))
	vp := h.cmd.Process.Pid
	g := guardians(t, vp)
	require.Len(t, g, guardianCount, "vramprof's guardians")
	require.NoError(t, syscall.Kill(g[0], syscall.SIGKILL))
	deadline := time.Now().Add(10 * time.Second)
	var next []int
	for {
		next = guardians(t, vp)
		if len(next) == guardianCount && !slices.Contains(next, g[0]) {
			break
		}
		require.True(t, time.Now().Before(deadline), "vramprof started no other guardian after pid %d died (guardians now: %v)", g[0], next)
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, byte('T'), procState(t, h.pid), "still held")
	require.NoError(t, h.cmd.Process.Kill())
	assert.Equal(t, 0, awaitTargetEnd(t, codeFile, 20*time.Second), "the target's exit code")
	truth, err := probetest.ReadTruth(truthFile)
	if assert.NoError(t, err, "the target's truth") {
		assert.Equal(t, "dlopen_runtime", truth.Scenario)
	}
	select { // vramprof's stderr is complete once every writer is gone
	case <-h.done:
	case <-time.After(30 * time.Second):
		t.Fatal("vramprof's stderr never closed")
	}
	assert.Contains(t, h.stderr.String(), fmt.Sprintf("the guardian (pid %d) died", g[0]), "vramprof says so")
	assert.Equal(t, 1, strings.Count(h.stderr.String(), fmt.Sprintf("pid %d stopped at a library load or exec: resumed it", h.pid)),
		"one guardian's note: the process is resumed once")
}

// TestGuardianKilledWithVramprof: a guardian and vramprof are killed
// together (0 to 10 ms apart, in both orders of the guardians) while
// vramprof holds a process stopped, 30 times. There is no moment for
// vramprof to start a replacement in: the other guardian resumes the
// process, once, and it finishes (exit 0, truth written). With one
// guardian, the target was left in state T whenever vramprof died before
// the replacement had started.
func TestGuardianKilledWithVramprof(t *testing.T) {
	probetest.RequirePrivilege(t)
	bin := probetest.Bin(t, "dlopen_runtime")
	gaps := []time.Duration{0, 0, 100 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond}
	for round := range 30 {
		gap := gaps[round%len(gaps)]
		tmp := t.TempDir()
		codeFile, truthFile := filepath.Join(tmp, "code"), filepath.Join(tmp, "truth.json")
		h := startHeldAtStop(t, []string{"VRAMPROF_TRUTH=" + truthFile, "VRAMPROF_TEST_CODE=" + codeFile},
			"sh", "-c", wrappedScript, bin)
		g := guardians(t, h.cmd.Process.Pid)
		require.Len(t, g, guardianCount, "vramprof's guardians, round %d", round)
		victim := g[(round/len(gaps))%len(g)]
		require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
		if gap > 0 {
			time.Sleep(gap)
		}
		require.NoError(t, h.cmd.Process.Kill())
		require.Equal(t, 0, awaitTargetEnd(t, codeFile, 20*time.Second),
			"the target's exit code: guardian %d and vramprof killed %v apart, round %d", victim, gap, round)
		truth, err := probetest.ReadTruth(truthFile)
		require.NoError(t, err, "the target's truth, round %d", round)
		require.Equal(t, "dlopen_runtime", truth.Scenario)
		select { // vramprof's stderr is complete once every writer is gone
		case <-h.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("vramprof's stderr never closed, round %d", round)
		}
		require.Equal(t, 1, strings.Count(h.stderr.String(), fmt.Sprintf("pid %d stopped at a library load or exec: resumed it", h.pid)),
			"one guardian resumed the process, once, round %d; stderr:\n%s", round, h.stderr.String())
	}
}
