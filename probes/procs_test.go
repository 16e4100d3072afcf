//go:build linux

package probes

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// fakeHost is a procHost without a kernel: processes are what starts says,
// other sessions' locks what owners says, and the BPF filter a set. Locks
// this session takes are real lock files, in a temporary LockDir.
type fakeHost struct {
	starts     map[uint32]uint64 // live processes: PID to start time
	owners     map[uint32]int    // PID to the other session holding it
	targets    map[uint32]bool   // the BPF filter
	failTarget error             // what target returns, when set
}

func (h *fakeHost) startTime(pid uint32) (uint64, error) {
	st, ok := h.starts[pid]
	if !ok {
		return 0, fmt.Errorf("%w: %d", ErrNoProcess, pid)
	}
	return st, nil
}

func (h *fakeHost) lock(pid uint32, start uint64) (*procLock, error) {
	if owner := h.heldBy(pid, start); owner != 0 {
		return nil, &TracedError{PID: pid, Owner: owner}
	}
	return lockProc(pid, start)
}

func (h *fakeHost) heldBy(pid uint32, _ uint64) int { return h.owners[pid] }

func (h *fakeHost) target(pid uint32) error {
	if h.failTarget != nil {
		return h.failTarget
	}
	h.targets[pid] = true
	return nil
}

func (h *fakeHost) untarget(pid uint32) { delete(h.targets, pid) }

// procFixture is a procTable on a fakeHost, with the notes it wrote and
// the Targets counter it keeps.
type procFixture struct {
	*procTable
	host    *fakeHost
	notes   []string
	targets atomic.Int64
	lockDir string
}

// mustProcTable makes a procTable on a fake host where the given processes
// (PID to start time) live. LockDir is a temporary directory until cleanup.
func mustProcTable(tb testing.TB, all bool, live map[uint32]uint64) *procFixture {
	tb.Helper()
	old := LockDir
	LockDir = tb.TempDir()
	tb.Cleanup(func() { LockDir = old })
	f := &procFixture{host: &fakeHost{starts: live, owners: map[uint32]int{}, targets: map[uint32]bool{}}, lockDir: LockDir}
	f.procTable = newProcTable(f.host, all, func(msg string) { f.notes = append(f.notes, msg) }, &f.targets)
	return f
}

// lockFile is the lock file of the process (pid, start) in the fixture's
// LockDir (see lockProc).
func (f *procFixture) lockFile(pid uint32, start uint64) string {
	return filepath.Join(f.lockDir, fmt.Sprintf("%d-%d.lock", pid, start))
}

func mustAdd(tb testing.TB, f *procFixture, pid uint32) *proc {
	tb.Helper()
	p, added, err := f.add(pid, false)
	require.NoError(tb, err)
	require.True(tb, added)
	return p
}

// TestProcTableAdd: a process is added once, locked, filtered for and
// counted; one that does not exist is not, unless the caller knows it.
func TestProcTableAdd(t *testing.T) {
	f := mustProcTable(t, false, map[uint32]uint64{10: 100})
	p := mustAdd(t, f, 10)
	assert.Equal(t, uint32(10), p.pid)
	assert.Equal(t, uint64(100), p.startTime)
	assert.True(t, f.host.targets[10], "in the BPF filter")
	assert.Equal(t, int64(1), f.targets.Load())
	assert.FileExists(t, f.lockFile(10, 100), "locked for this session")

	again, added, err := f.add(10, false)
	require.NoError(t, err)
	assert.False(t, added, "traced already")
	assert.Same(t, p, again)
	assert.Equal(t, int64(1), f.targets.Load())

	_, _, err = f.add(11, false)
	require.ErrorIs(t, err, ErrNoProcess)
	assert.False(t, f.host.targets[11])

	// A fork child already gone: its parent describes it.
	child, added, err := f.add(11, true)
	require.NoError(t, err)
	assert.True(t, added)
	assert.Zero(t, child.startTime)
	assert.Nil(t, child.lock, "nothing to lock: no start time")
	assert.Equal(t, int64(2), f.targets.Load())
}

// TestProcTableAddHeld: a process another session holds is never added;
// a session tracing every process takes no locks.
func TestProcTableAddHeld(t *testing.T) {
	for _, tc := range []struct {
		name string
		all  bool
	}{{"single", false}, {"all", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := mustProcTable(t, tc.all, map[uint32]uint64{10: 100, 12: 120})
			f.host.owners[12] = 999
			_, _, err := f.add(12, false)
			var held *TracedError
			require.ErrorAs(t, err, &held)
			assert.Equal(t, &TracedError{PID: 12, Owner: 999}, held)
			assert.False(t, f.host.targets[12])
			assert.Zero(t, f.targets.Load())

			mustAdd(t, f, 10)
			if tc.all {
				assert.NoFileExists(t, f.lockFile(10, 100), "an --all session holds no lock")
			} else {
				assert.FileExists(t, f.lockFile(10, 100))
			}
		})
	}
}

// TestProcTableAddTargetFails: a process the BPF filter refuses is not
// traced, and its lock is let go at once.
func TestProcTableAddTargetFails(t *testing.T) {
	f := mustProcTable(t, false, map[uint32]uint64{10: 100})
	f.host.failTarget = errors.New("map full")
	_, _, err := f.add(10, false)
	require.ErrorContains(t, err, "map full")
	assert.Empty(t, f.procs)
	assert.Zero(t, f.targets.Load())
	assert.NoFileExists(t, f.lockFile(10, 100))
}

// TestProcTableUntrack: an untracked process is exited, out of the filter
// and unlocked, and counted out once.
func TestProcTableUntrack(t *testing.T) {
	f := mustProcTable(t, false, map[uint32]uint64{10: 100, 20: 200})
	p := mustAdd(t, f, 10)
	mustAdd(t, f, 20)
	f.untrack(p)
	f.untrack(p)
	assert.True(t, p.exited)
	assert.True(t, p.forget, "its records may still be in the ring")
	assert.False(t, f.host.targets[10])
	assert.True(t, f.host.targets[20])
	assert.Equal(t, int64(1), f.targets.Load())
	assert.NoFileExists(t, f.lockFile(10, 100))
	assert.False(t, f.allExited(), "20 lives")

	// retire leaves the filter alone (the fork tracepoint's new child
	// with the PID is in it already).
	q := f.procs[20]
	f.retire(q)
	assert.True(t, f.host.targets[20])
	assert.Zero(t, f.targets.Load())
	assert.True(t, f.allExited())
}

// TestProcTableSweep: processes that end without a record are noticed,
// the PID's reuse by another process too.
func TestProcTableSweep(t *testing.T) {
	f := mustProcTable(t, false, map[uint32]uint64{10: 100, 20: 200, 30: 300, 40: 400, 50: 500})
	for _, pid := range []uint32{10, 20, 30} {
		mustAdd(t, f, pid)
	}
	f.held[40] = 400          // another session's, alive
	f.held[50] = 500          // another session's, its PID reused below
	delete(f.host.starts, 10) // exited
	f.host.starts[20] = 201   // exited, and the PID taken by a new process
	f.host.starts[50] = 501
	f.sweep()
	assert.True(t, f.procs[10].exited, "gone")
	assert.True(t, f.procs[20].exited, "PID reused")
	assert.False(t, f.procs[30].exited)
	assert.Equal(t, map[uint32]bool{30: true}, f.host.targets)
	assert.Equal(t, map[uint32]uint64{40: 400}, f.held)
	assert.Empty(t, f.notes)
}

// TestProcTableSweepHandover: a session tracing every process leaves one
// that a single-process session took since to that session, and says so
// once.
func TestProcTableSweepHandover(t *testing.T) {
	f := mustProcTable(t, true, map[uint32]uint64{10: 100})
	p := mustAdd(t, f, 10)
	f.sweep()
	assert.False(t, p.exited, "nobody else holds it")

	f.host.owners[10] = 999
	f.sweep()
	f.sweep()
	assert.True(t, p.exited)
	assert.False(t, f.host.targets[10])
	assert.Equal(t, map[uint32]uint64{10: 100}, f.held)
	assert.Equal(t, []string{"skipping pid 10: already traced by another vramprof session (vramprof pid 999)"}, f.notes)
}

// TestProcTableLeave: the reason a process is left alone is noted once per
// process: again for a later process with its PID, never for one gone.
func TestProcTableLeave(t *testing.T) {
	f := mustProcTable(t, true, map[uint32]uint64{10: 100})
	f.giveUp(10, errors.New("attach uprobe: no such file"))
	f.giveUp(10, errors.New("attach uprobe: no such file"))
	f.host.starts[10] = 101
	f.hold(10, &TracedError{PID: 10})
	f.leave(11, "gone")
	assert.Equal(t, []string{
		"skipping pid 10: attach uprobe: no such file",
		"skipping pid 10: already traced by another vramprof session",
	}, f.notes)
	assert.Equal(t, map[uint32]uint64{10: 101}, f.held)
}

// TestProcTableReap: each exited process is dropped once; a session
// tracing every process then forgets it and its exit status, a
// single-process session keeps both for ExitStatus.
func TestProcTableReap(t *testing.T) {
	for _, tc := range []struct {
		name string
		all  bool
	}{{"single", false}, {"all", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := mustProcTable(t, tc.all, map[uint32]uint64{10: 100, 20: 200})
			p := mustAdd(t, f, 10)
			mustAdd(t, f, 20)
			f.noteExit(10, 3<<8) // exit(3), as wait(2) encodes it
			f.untrack(p)
			var dropped []uint32
			drop := func(p *proc) { dropped = append(dropped, p.pid) }
			f.reap(drop, false)
			f.reap(drop, false)
			assert.Equal(t, []uint32{10}, dropped)
			if tc.all {
				assert.NotContains(t, f.procs, uint32(10))
				assert.NotContains(t, f.exits, uint32(10))
				return
			}
			assert.Same(t, p, f.procs[10])
			assert.Equal(t, syscall.WaitStatus(3<<8), f.exits[10])
			assert.Equal(t, 3, f.exits[10].ExitStatus())
		})
	}
}

// TestProcTableReapDue: a reader that is behind never finds the ring
// empty; the processes known to have exited when the mark was taken are
// dropped once it is reached (reap with dueOnly), the ones that exited
// after wait for the next mark.
func TestProcTableReapDue(t *testing.T) {
	f := mustProcTable(t, true, map[uint32]uint64{10: 100, 20: 200, 30: 300})
	p10, p20 := mustAdd(t, f, 10), mustAdd(t, f, 20)
	mustAdd(t, f, 30)
	var dropped []uint32
	drop := func(p *proc) { dropped = append(dropped, p.pid) }
	f.untrack(p10)
	f.markDue()
	f.untrack(p20) // after the mark: its records may follow the mark's position
	f.reap(drop, true)
	assert.Equal(t, []uint32{10}, dropped, "the mark reached: only what exited before it")
	assert.NotContains(t, f.procs, uint32(10))
	f.reap(drop, true)
	assert.Equal(t, []uint32{10}, dropped, "20 is not due until the next mark")
	f.markDue()
	f.reap(drop, true)
	assert.Equal(t, []uint32{10, 20}, dropped)
	assert.Contains(t, f.procs, uint32(30), "running: kept")
}

// TestProcTableAllExited: a single-process session ends when its targets
// are gone; one tracing every process waits for more.
func TestProcTableAllExited(t *testing.T) {
	single := mustProcTable(t, false, map[uint32]uint64{10: 100})
	assert.False(t, single.allExited(), "nothing traced yet")
	p := mustAdd(t, single, 10)
	assert.False(t, single.allExited())
	single.untrack(p)
	assert.True(t, single.allExited())

	all := mustProcTable(t, true, map[uint32]uint64{10: 100})
	p = mustAdd(t, all, 10)
	all.untrack(p)
	assert.False(t, all.allExited())
}

// TestProcTableRealLockDir checks the fixture against the real lock
// protocol: the lock a fake-driven table takes keeps lockProc out.
func TestProcTableRealLockDir(t *testing.T) {
	f := mustProcTable(t, false, map[uint32]uint64{10: 100})
	mustAdd(t, f, 10)
	_, err := lockProc(10, 100)
	var held *TracedError
	require.ErrorAs(t, err, &held)
	assert.Equal(t, os.Getpid(), held.Owner)
	assert.Equal(t, "pid 10 is already traced by another vramprof session (vramprof pid "+strconv.Itoa(os.Getpid())+")", err.Error())
}

// TestProcReaders reads /proc about a child this test starts, named with
// parentheses and spaces (the command name field of /proc/PID/stat may
// hold both), and about a kernel thread, which has no command line.
func TestProcReaders(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	exe, err := filepath.EvalSymlinks(sleep)
	require.NoError(t, err)
	odd := filepath.Join(t.TempDir(), "a) b (c")
	require.NoError(t, os.Symlink(exe, odd))
	child := exec.Command(odd, "30")
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	pid := child.Process.Pid
	// Start returns once the exec is past its point of no return, which is
	// before the kernel has set up the new image's arguments: until then
	// /proc/PID/cmdline reads empty. Wait for the image, not for a time.
	for i := 0; i < 400; i++ {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); len(b) > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}

	info := procInfo(uint32(pid))
	assert.Equal(t, &event.Process{PID: uint32(pid), Command: []string{odd, "30"}, PPID: uint32(os.Getpid()), Exe: exe,
		Cgroup: selfCgroupPath(t)}, info, "the child is in this test's cgroup")
	self, err := procStartTime(os.Getpid())
	require.NoError(t, err)
	started, err := procStartTime(pid)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, started, self, "started after this test")

	require.NoError(t, child.Process.Signal(syscall.SIGSTOP))
	state := byte(0)
	for i := 0; i < 200 && state != 'T'; i++ {
		time.Sleep(5 * time.Millisecond)
		state = procState(pid)
	}
	assert.Equal(t, byte('T'), state, "stopped")

	// kthreadd: no command line, no executable, its parent the idle task,
	// the root cgroup.
	assert.Equal(t, &event.Process{PID: 2, Cgroup: "/"}, procInfo(2))

	_, err = procStartTime(1 << 30)
	require.ErrorIs(t, err, ErrNoProcess)
	assert.Equal(t, "no such process: 1073741824", err.Error())
	assert.Zero(t, procState(1<<30))
	assert.Equal(t, &event.Process{PID: 1 << 30}, procInfo(1<<30))
}

// selfCgroupPath is this process's cgroup as procCgroup documents it, read
// from /proc/self/cgroup here: the v2 line ("0::"), unless it is the root
// and a v1 hierarchy has another path (a hybrid host).
func selfCgroupPath(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	v2, v1 := "", ""
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		require.Len(t, f, 3, line)
		switch {
		case f[0] == "0" && f[1] == "":
			v2 = f[2]
		case v1 == "" && f[2] != "/":
			v1 = f[2]
		}
	}
	if (v2 == "" || v2 == "/") && v1 != "" {
		return v1
	}
	return v2
}

// startZombie starts true(1) and returns its PID once it has exited, not
// reaped (a zombie) until the test ends.
func startZombie(t *testing.T) int {
	t.Helper()
	child := exec.Command("true")
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Wait() })
	pid := child.Process.Pid
	for i := 0; i < 400 && procState(pid) != 'Z'; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, byte('Z'), procState(pid), "exited, not reaped")
	return pid
}

// TestProcInfoExiting: a process read after it exited (a zombie, not yet
// reaped) is in the cgroup it ran in, its parent's (this test's), not the
// root its /proc/PID/cgroup shows once it has exited.
func TestProcInfoExiting(t *testing.T) {
	pid := startZombie(t)
	info := procInfo(uint32(pid))
	assert.Equal(t, uint32(os.Getpid()), info.PPID)
	assert.Equal(t, selfCgroupPath(t), info.Cgroup, "the cgroup it ran in")
}
