//go:build linux

package main

import (
	"context"
	"encoding/json"
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
	"github.com/vramprof/vramprof/report/exporter"
)

// loadedRuntime runs the dlopen_runtime scenario on copies of the fake runtime
// and driver made for this test, so that no process anywhere has mapped
// those files (those inodes) before: the --all session meets it first at the dlopen. It
// runs in a session of its own, as a daemon would, with no controlling
// terminal (a process with one is never stopped by an --all session). It
// returns the scenario's truth. With under, the scenario is the last
// argument of that command (vramprof run ... --).
func loadedRuntime(t *testing.T, under ...string) *probetest.Truth {
	t.Helper()
	tmp := t.TempDir()
	copyRuntime(t, tmp)
	return runLoaded(t, filepath.Join(tmp, "libcudart.so.12"), under...)
}

// copyRuntime copies the fake runtime and driver into dir (the runtime
// loads the driver from its own folder).
func copyRuntime(t *testing.T, dir string) {
	t.Helper()
	libs := filepath.Join(filepath.Dir(probetest.Bin(t, "dlopen_runtime")), "..", "lib")
	for _, name := range []string{"libcudart.so.12", "libcuda.so.1"} {
		data, err := os.ReadFile(filepath.Join(libs, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o755))
	}
}

// runLoaded runs dlopen_runtime on the runtime lib (see loadedRuntime) and returns
// its truth.
func runLoaded(t *testing.T, lib string, under ...string) *probetest.Truth {
	t.Helper()
	truthPath := filepath.Join(t.TempDir(), "truth.json")
	// Bounded: a process left stopped would never end.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, probetest.Bin(t, "dlopen_runtime"))
	if len(under) > 0 {
		cmd = exec.CommandContext(ctx, under[0], append(under[1:], probetest.Bin(t, "dlopen_runtime"))...)
	}
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "FAKECUDA_LIB="+lib, "VRAMPROF_TRUTH="+truthPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "dlopen_runtime (left stopped?%s):\n%s", stoppedNote(t), out)
	truth := probetest.MustReadTruth(t, truthPath)
	require.NotZero(t, truth.Totals.Allocations, "the scenario allocates")
	return truth
}

// startAll runs `vramprof attach --all -o DIR` until it is live; stop ends
// it and returns report.json's processes by PID.
func startAll(t *testing.T, env ...string) (stop func() map[uint32]allProcess, stderr *syncBuffer) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "out")
	stderr, stopAll := startDaemon(t, env, "tracing every CUDA process", "attach", "--all", "-o", dir)
	return func() map[uint32]allProcess {
		stopAll()
		data, err := os.ReadFile(filepath.Join(dir, "report.json"))
		require.NoError(t, err)
		var rep struct {
			Processes []allProcess `json:"processes"`
		}
		require.NoError(t, json.Unmarshal(data, &rep))
		out := map[uint32]allProcess{}
		for _, p := range rep.Processes {
			out[p.PID] = p
		}
		return out
	}, stderr
}

// allProcess is a process's figures in an --all session's report.json.
type allProcess struct {
	PID            uint32 `json:"pid"`
	Allocations    uint64 `json:"allocations"`
	Frees          uint64 `json:"frees"`
	UnknownFrees   uint64 `json:"unknown_frees"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	PeakBytes      uint64 `json:"peak_bytes"`
	LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
	// PreexistingBasis is "traced_from_start" for a process traced from
	// its start, else how its memory from before the attach was judged.
	PreexistingBasis string `json:"preexisting_basis"`
	Devices          []struct {
		Index int32 `json:"index"`
	} `json:"devices"`
}

// assertTruth compares a process's figures with its truth (an attached
// process's truth counts its frees of memory allocated before the attach as
// unknown frees, as vramprof must).
func assertTruth(t *testing.T, procs map[uint32]allProcess, truth *probetest.Truth, stderr *syncBuffer) {
	t.Helper()
	p, ok := procs[truth.PID]
	if !assert.True(t, ok, "%s (pid %d) traced; stderr:\n%s", truth.Scenario, truth.PID, stderr.String()) {
		return
	}
	want := truth.Totals
	assert.Equal(t, want.Allocations, p.Allocations, "allocations")
	assert.Equal(t, want.Frees, p.Frees, "frees")
	assert.Equal(t, want.UnknownFrees, p.UnknownFrees, "unknown frees")
	assert.Equal(t, want.AllocatedBytes, p.AllocatedBytes, "allocated bytes")
	assert.Equal(t, want.PeakBytes, p.PeakBytes, "peak")
	assert.Equal(t, want.LiveBytesAtEnd, p.LiveBytesAtEnd, "live at end")
}

// TestAttachAllLoadedRuntime: a process that dlopen()s a copy of the runtime
// no process had mapped when `attach --all` started is traced from its
// first call: its figures equal the scenario's truth. (Before, its calls
// ran while the new copy was being probed, and some or all were missed.)
//
// A process that started after the session began was traced from its
// start: it is not "attached mid-run", and its device is known as run
// knows it (a thread that chose none uses device 0), not "unknown".
func TestAttachAllLoadedRuntime(t *testing.T) {
	probetest.RequirePrivilege(t)
	stop, stderr := startAll(t)
	truth := loadedRuntime(t)
	procs := stop()
	assertTruth(t, procs, truth, stderr)
	assertFromStart(t, procs[truth.PID])
}

// assertFromStart checks that a process started after the session began is
// reported as traced from its start, on device 0 alone (the scenarios
// choose no device).
func assertFromStart(t *testing.T, p allProcess) {
	t.Helper()
	assert.Equal(t, "traced_from_start", p.PreexistingBasis, "pid %d started after the session began", p.PID)
	var devices []int32
	for _, d := range p.Devices {
		devices = append(devices, d.Index)
	}
	assert.Equal(t, []int32{0}, devices, "pid %d's devices (-1: unknown)", p.PID)
}

// TestAttachAllLoadedRuntimeOverlay is TestAttachAllLoadedRuntime in a
// container's root: the runtime's copy is on overlayfs, where stat(2) gives
// the overlay's device and the kernel's faults and probes the layer's file
// underneath. Two processes load it one after the other: both are traced
// exactly and from their start (the second after the file is known,
// probes/loaded.go).
func TestAttachAllLoadedRuntimeOverlay(t *testing.T) {
	probetest.RequirePrivilege(t)
	lower, merged := probetest.Overlay(t)
	copyRuntime(t, lower)

	stop, stderr := startAll(t)
	first := runLoaded(t, filepath.Join(merged, "libcudart.so.12"))
	second := runLoaded(t, filepath.Join(merged, "libcudart.so.12"))
	procs := stop()
	assertTruth(t, procs, first, stderr)
	assertTruth(t, procs, second, stderr)
	// The first was stopped at its dlopen of a new file, and adopted
	// then; the second, loading a known file, runs on, and under load may
	// exit before the reader reaches its first record: it is described by
	// the record of its mapping of the runtime (probes adoptGone), so it
	// too is traced from its start, on device 0.
	assertFromStart(t, procs[first.PID])
	assertFromStart(t, procs[second.PID])
}

// TestAttachAllNewExecutable: an executable with the runtime linked in
// (static_runtime, dynamically linked to libc), copied for this test so no
// process ran that file before, started after `attach --all`: its first
// call is traced too (the faults on the new executable make it pending;
// the loader's start-up rendezvous stops it).
func TestAttachAllNewExecutable(t *testing.T) {
	probetest.RequirePrivilege(t)
	stop, stderr := startAll(t)
	src := probetest.Bin(t, "static_runtime")
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin", "static_runtime")
	for dst, from := range map[string]string{
		bin: src,
		// The runtime finds the driver in ../lib beside the executable.
		filepath.Join(tmp, "lib", "libcuda.so.1"): filepath.Join(filepath.Dir(src), "..", "lib", "libcuda.so.1"),
	} {
		data, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(t, os.WriteFile(dst, data, 0o755))
	}
	truthPath := filepath.Join(tmp, "truth.json")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "VRAMPROF_TRUTH="+truthPath, "FAKECUDA_DRIVER=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "static_runtime:\n%s", out)
	truth := probetest.MustReadTruth(t, truthPath)
	require.NotZero(t, truth.Totals.Allocations)
	procs := stop()
	assertTruth(t, procs, truth, stderr)
	assertFromStart(t, procs[truth.PID])
}

// TestServeLoadedRuntime is TestAttachAllLoadedRuntime for `vramprof serve`:
// the exited process's figures, kept for the grace period, equal the
// truth.
func TestServeLoadedRuntime(t *testing.T) {
	probetest.RequirePrivilege(t)
	addr := freeLoopback(t)
	_, stop := startDaemon(t, nil, "vramprof: serving http://"+addr, "serve", "--listen", addr, "--per-process")

	truth := loadedRuntime(t)
	want := truth.Totals
	base := "http://" + addr
	pid := strconv.Itoa(int(truth.PID))
	// The last events reach serve up to a reorder window after the exit,
	// which serve may notice first: wait for both.
	deadline := time.Now().Add(15 * time.Second)
	for {
		fams := scrapeMetrics(t, base)
		exited, _ := metricValue(fams, exporter.MetricProcessExited, pid)
		frees, _ := metricValue(fams, exporter.MetricFrees, pid)
		if exited == 1 && frees == float64(want.Frees) || time.Now().After(deadline) {
			for _, tc := range []struct {
				metric string
				want   uint64
			}{
				{exporter.MetricAllocations, want.Allocations},
				{exporter.MetricFrees, want.Frees},
				{exporter.MetricAllocatedBytes, want.AllocatedBytes},
				{exporter.MetricLiveBytes, want.LiveBytesAtEnd},
				{exporter.MetricProcessPeakBytes, want.PeakBytes},
			} {
				v, ok := metricValue(fams, tc.metric, pid)
				if assert.True(t, ok, "%s{pid=%q} missing", tc.metric, pid) {
					assert.Equal(t, float64(tc.want), v, "%s{pid=%q}", tc.metric, pid)
				}
			}
			assert.Equal(t, float64(1), exited, "exited")
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	stop()
}

// TestAttachAllLoadedRuntimeHeld: `vramprof run` traces dlopen_runtime (copies
// of the runtime and driver no process mapped before) while `attach --all`
// runs. Both sessions stop the process at its dlopen; the --all session
// leaves it to run's session and must not resume it before run's has
// probed the new copy: run's figures equal the truth, and the process ends
// (never left stopped). (Whether the --all session also counted the
// process's calls depends on whether it read the lock before the process
// exited: not asserted.)
func TestAttachAllLoadedRuntimeHeld(t *testing.T) {
	probetest.RequirePrivilege(t)
	stop, _ := startAll(t)

	runDir := filepath.Join(t.TempDir(), "run")
	truth := loadedRuntime(t, binPath, "run", "-q", "-o", runDir, "--")
	rep := mustReadReport(t, filepath.Join(runDir, "report.json"))
	tt, want := rep.Totals, truth.Totals
	assert.Equal(t, want.Allocations, val(t, "allocations", tt.Allocations), "allocations")
	assert.Equal(t, want.Frees, val(t, "frees", tt.Frees), "frees")
	assert.Equal(t, want.AllocatedBytes, val(t, "allocated_bytes", tt.AllocatedBytes), "allocated_bytes")
	assert.Equal(t, want.LiveBytesAtEnd, val(t, "live_bytes_at_end", tt.LiveBytesAtEnd), "live_bytes_at_end")
	stop() // the --all session ends cleanly
}

// TestAttachAllKilledAtStop: `attach --all` SIGKILLs itself (the test hook)
// at the first stop it reads, at the latest dlopen_runtime's stop at its
// dlopen of a new runtime copy. The guardian resumes the stopped process:
// dlopen_runtime finishes with exit code 0 and its truth written, and the
// session is dead by then.
func TestAttachAllKilledAtStop(t *testing.T) {
	probetest.RequirePrivilege(t)
	// The session dies at the first stop it reads: on a shared host that
	// may be another process's stop before the session is live (the
	// guardian resumed that one). Try again, a few times at most.
	var (
		stderr *syncBuffer
		done   chan error
	)
	for attempt := 1; ; attempt++ {
		var live bool
		stderr, done, live = startAttachAllDieAtStop(t)
		if live {
			break
		}
		require.Less(t, attempt, 5, "attach --all met another process's stop before it was live %d times; stderr:\n%s", attempt, stderr.String())
		t.Logf("attempt %d: attach --all met another process's stop before it was live; again", attempt)
	}

	truth := loadedRuntime(t) // exits 0, truth written: resumed
	assert.Equal(t, "dlopen_runtime", truth.Scenario)
	select {
	case err := <-done:
		assert.True(t, killedBySIGKILL(err), "attach --all killed at a stop: %v; stderr:\n%s", err, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("attach --all still runs: dlopen_runtime was not stopped; stderr:\n%s", stderr.String())
	}
}

// startAttachAllDieAtStop starts `attach --all` that kills itself at the
// first stop it reads, and waits until it is live; live is false when it
// was killed at another process's stop before that.
func startAttachAllDieAtStop(t *testing.T) (stderr *syncBuffer, done chan error, live bool) {
	t.Helper()
	stderr = &syncBuffer{}
	cmd := exec.Command(binPath, "attach", "--all", "-o", filepath.Join(t.TempDir(), "out"))
	cmd.Env = append(os.Environ(), dieAtStopEnv+"=1")
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(stderr.String(), "tracing every CUDA process") {
		select {
		case err := <-done:
			require.True(t, killedBySIGKILL(err), "attach --all ended: %v; stderr:\n%s", err, stderr.String())
			return stderr, done, false
		default:
		}
		require.True(t, time.Now().Before(deadline), "not live; stderr:\n%s", stderr.String())
		time.Sleep(20 * time.Millisecond)
	}
	return stderr, done, true
}

// runWatchingStops runs cmd to its end as a job-control shell watches its
// job, with wait4(WUNTRACED|WCONTINUED), and returns how many times it was
// seen stopped and its exit code. A stop is reported once: as stopped when
// the wait comes while the process is stopped, else as continued (stops
// that come and go between two waits report as one). Once a child has
// exited, wait forgets that it was stopped and continued: a stop ended just
// before the exit went unseen whenever the wait came late (about half the
// runs after the terminal run). So the process is held at its end by the
// truth's exit gate (a FIFO at gate, VRAMPROF_TRUTH_EXIT_GATE) until every
// report has been collected. A stopped process is left for whoever stopped
// it to resume (SIGCONT after 30 s otherwise, and the test fails).
func runWatchingStops(t *testing.T, cmd *exec.Cmd, gate string) (stops, code int) {
	t.Helper()
	require.NoError(t, syscall.Mkfifo(gate, 0o600))
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "VRAMPROF_TRUTH_EXIT_GATE="+gate)
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	atEnd := make(chan *os.File, 1)
	go func() {
		// Returns when the process opens the gate for reading: at its end.
		f, err := os.OpenFile(gate, os.O_WRONLY, 0)
		if err != nil {
			f = nil
		}
		atEnd <- f
	}()
	var held *os.File // the gate, while the process waits at it
	released := false
	defer func() {
		if released {
			return
		}
		// Ended before its gate (or the test failed): the open above still
		// waits for a reader, so be one.
		if r, err := os.OpenFile(gate, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			if held == nil {
				held = <-atEnd
			}
			if held != nil {
				_ = held.Close()
			}
			_ = r.Close()
		}
	}()
	seenStopped := false // the last report was a stop, not yet reported continued
	for {
		flags := syscall.WUNTRACED | syscall.WCONTINUED
		if !released {
			flags |= syscall.WNOHANG
		}
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(pid, &ws, flags, nil)
		if err == syscall.EINTR {
			continue
		}
		require.NoError(t, err)
		switch {
		case wpid == 0 && held != nil:
			// At its end, and every report collected: let it exit.
			require.NoError(t, held.Close())
			held, released = nil, true
		case wpid == 0:
			select {
			case held = <-atEnd:
				require.NotNil(t, held, "open the exit gate")
			case <-time.After(time.Millisecond):
			}
		case ws.Continued():
			if !seenStopped {
				stops++
			}
			seenStopped = false
		case ws.Stopped():
			stops++
			seenStopped = true
			deadline := time.Now().Add(30 * time.Second)
			for procState(t, pid) == 'T' {
				if time.Now().After(deadline) {
					_ = syscall.Kill(pid, syscall.SIGCONT)
					t.Errorf("pid %d left stopped for 30 s", pid)
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		case ws.Exited():
			return stops, ws.ExitStatus()
		case ws.Signaled():
			return stops, 128 + int(ws.Signal())
		}
	}
}

// TestAttachAllTerminalNotStopped: under `attach --all`, dlopen_runtime on new
// copies of the runtime and driver, watched by its parent as a shell
// watches a job (wait4 with WUNTRACED|WCONTINUED). With a controlling
// terminal it is never stopped: a shell's job control would take the
// terminal back. In a session of its own without one it may be (that is
// how its first calls are traced), and is resumed. Both finish with exit
// code 0.
func TestAttachAllTerminalNotStopped(t *testing.T) {
	probetest.RequirePrivilege(t)
	stop, _ := startAll(t)
	defer stop()
	// One folder for both runs' copies, removed after both: a file deleted
	// during the session could hand its inode to the next copy, which the
	// session would then take for the file it examined (see the report).
	dirs := t.TempDir()
	for i, tc := range []struct {
		name     string
		terminal bool
	}{{"terminal", true}, {"no terminal", false}} {
		t.Run(tc.name, func(t *testing.T) {
			libs := filepath.Join(filepath.Dir(probetest.Bin(t, "dlopen_runtime")), "..", "lib")
			tmp := filepath.Join(dirs, strconv.Itoa(i))
			require.NoError(t, os.Mkdir(tmp, 0o755))
			for _, name := range []string{"libcudart.so.12", "libcuda.so.1"} {
				data, err := os.ReadFile(filepath.Join(libs, name))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(tmp, name), data, 0o755))
			}
			cmd := exec.Command(probetest.Bin(t, "dlopen_runtime"))
			cmd.Env = append(os.Environ(), "FAKECUDA_LIB="+filepath.Join(tmp, "libcudart.so.12"),
				"VRAMPROF_TRUTH="+filepath.Join(tmp, "truth.json"))
			if tc.terminal {
				_, slave := openPTY(t, 24, 80)
				cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
				cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			} else {
				cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			}
			stops, code := runWatchingStops(t, cmd, filepath.Join(tmp, "exit.gate"))
			assert.Equal(t, 0, code, "exit code")
			if tc.terminal {
				assert.Zero(t, stops, "a process with a terminal is never stopped")
			} else {
				// The control: the same watch sees the stop that traces
				// the process's first calls, so the zero above is no
				// blind spot.
				assert.Positive(t, stops, "a process without a terminal is stopped at its dlopen, and resumed")
			}
			t.Logf("pid %d seen stopped %d times", cmd.Process.Pid, stops)
		})
	}
}
