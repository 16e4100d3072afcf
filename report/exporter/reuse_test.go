package exporter

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// feedInstance writes a Process record for pid, then n rounds of feed's
// events (2n allocations, n of 1 MiB live at the end).
func feedInstance(t *testing.T, x *Exporter, pid uint32, n int) {
	t.Helper()
	feed(t, x, pid, 0, n)
}

// TestPIDReuse: a process is its PID and its start time. A new process on
// the PID of one that exited (its Process record before any sweep saw the
// exit) gets its own series and counters, the old one is marked exited
// and the new one is not; a profile by PID is the new one's, by start the
// old one's; and a process gone before its start could be read is exited,
// whatever runs on its PID now.
func TestPIDReuse(t *testing.T) {
	const pid = 4242
	start := uint64(100)
	x := New(Options{PerProcess: true,
		Start: func(uint32) (uint64, error) { return start, nil },
		Alive: func(_ uint32, st uint64) bool { return st == start },
	})
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()

	feedInstance(t, x, pid, 3) // the first process: 6 allocations, 3 MiB live
	start = 200                // it exits; a new process takes its PID
	feedInstance(t, x, pid, 1) // 2 allocations, 1 MiB live
	x.Sweep()

	fams := scrape(t, srv.URL)
	for _, tc := range []struct {
		start        string
		allocs, live float64
		exited       float64
	}{{"100", 6, 3 << 20, 1}, {"200", 2, 1 << 20, 0}} {
		v, ok := value(fams, MetricAllocations, pid, "start", tc.start)
		require.True(t, ok, "start %s", tc.start)
		assert.Equal(t, tc.allocs, v, "allocations of start %s", tc.start)
		v, _ = value(fams, MetricLiveBytes, pid, "start", tc.start)
		assert.Equal(t, tc.live, v, "live bytes of start %s", tc.start)
		v, _ = value(fams, MetricProcessExited, pid, "start", tc.start)
		assert.Equal(t, tc.exited, v, "exited, start %s", tc.start)
	}
	res, err := x.Result(pid)
	require.NoError(t, err)
	require.Len(t, res.Processes, 1)
	assert.Equal(t, uint64(2), res.Processes[0].Totals.Allocations, "a PID names its latest process")
	old, err := x.Profile("inuse", strconv.Itoa(pid), "100")
	require.NoError(t, err)
	var inuse int64
	for _, s := range old.Sample {
		inuse += s.Value[3] // inuse_space
	}
	assert.Equal(t, int64(3*MiB), inuse, "the first process's profile, by its start")

	// An exec keeps the process: same start, one instance.
	require.NoError(t, x.Write(&event.Process{PID: pid, Command: []string{"/usr/bin/python3"}}))
	assert.Len(t, x.processes(), 2)
	assert.Equal(t, "python3", x.cur[pid].command)
}

// TestGoneBeforeSeen: a process whose first record comes after it exited
// (its start cannot be read) is exited at once, even though another
// process, alive, now has its PID (the default Alive reads /proc).
func TestGoneBeforeSeen(t *testing.T) {
	x := New(Options{PerProcess: true, Start: func(uint32) (uint64, error) { return 0, errors.New("gone") }})
	pid := uint32(os.Getpid()) // a live process on the PID
	require.NoError(t, x.Write(&event.Process{PID: pid, Command: []string{"/usr/bin/short"}}))
	x.Sweep()
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	v, ok := value(scrape(t, srv.URL), MetricProcessExited, pid, "command", "short")
	require.True(t, ok)
	assert.Equal(t, float64(1), v)
}

// uptimeTicks is the time since boot in clock ticks (/proc/uptime has
// hundredths of seconds, USER_HZ's 100 ticks a second).
func uptimeTicks(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/uptime")
	require.NoError(t, err)
	f := strings.Fields(string(b))
	require.NotEmpty(t, f)
	secs, frac, _ := strings.Cut(f[0], ".")
	s, err := strconv.ParseUint(secs+frac, 10, 64)
	require.NoError(t, err)
	return s
}

// TestPIDReuseForced reuses a PID for real, forcing the kernel's next PID
// with /proc/sys/kernel/ns_last_pid, and lets the exporter read /proc
// (its default Start and Alive): the first process is exited, the second,
// on the same PID, running, each with its own start.
func TestPIDReuseForced(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to write /proc/sys/kernel/ns_last_pid; CI=true: it must run")
		}
		t.Skip("needs root to write /proc/sys/kernel/ns_last_pid")
	}
	x := New(Options{})
	first := exec.Command("sleep", "60")
	require.NoError(t, first.Start())
	pid := first.Process.Pid
	require.NoError(t, x.Write(&event.Process{PID: uint32(pid), Command: first.Args}))
	require.NoError(t, first.Process.Kill())
	_ = first.Wait()
	// Start times count clock ticks (10 ms): the second process must start
	// in a later one to be told apart. Wait until a process started now
	// would (the kernel's uptime, in ticks, is past the first's start).
	firstStart := x.cur[uint32(pid)].start
	require.NotZero(t, firstStart)
	for uptimeTicks(t) <= firstStart {
		runtime.Gosched()
	}

	// Another process may take the PID first on a busy host: try again.
	var second *exec.Cmd
	for range 50 {
		require.NoError(t, os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0o644))
		c := exec.Command("sleep", "60")
		require.NoError(t, c.Start())
		if c.Process.Pid == pid {
			second = c
			break
		}
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	if second == nil {
		t.Fatalf("pid %d was never reused", pid)
	}
	t.Cleanup(func() { _ = second.Process.Kill(); _ = second.Wait() })
	require.NoError(t, x.Write(&event.Process{PID: uint32(pid), Command: []string{"sleep", "second"}}))
	x.Sweep()

	procs := x.processes()
	require.Len(t, procs, 2, "one instance per process")
	assert.NotEqual(t, procs[0].start, procs[1].start)
	assert.False(t, procs[0].exitedAt().IsZero(), "the first is exited")
	assert.True(t, procs[1].exitedAt().IsZero(), "the second, on the same PID, runs")
	want, err := startTime(uint32(pid))
	require.NoError(t, err)
	assert.Equal(t, want, procs[1].start, fmt.Sprintf("pid %d", pid))
}

// TestExecAfterExit: an exec's Process record read after the process
// exited (its start can no longer be read) keeps the running instance,
// renamed, rather than marking it exited and starting another with no
// start: one process, one set of figures.
func TestExecAfterExit(t *testing.T) {
	const pid = 4243
	var startErr error
	x := New(Options{PerProcess: true,
		Start: func(uint32) (uint64, error) { return 100, startErr },
		Alive: func(uint32, uint64) bool { return true },
	})
	feedInstance(t, x, pid, 3)
	startErr = errors.New("gone")
	require.NoError(t, x.Write(&event.Process{PID: pid, Command: []string{"/usr/bin/python3"}}))
	require.Len(t, x.processes(), 1)
	p := x.cur[pid]
	assert.Equal(t, uint64(100), p.start)
	assert.Equal(t, "python3", p.command)
	assert.True(t, p.exitedAt().IsZero(), "still running")
}
