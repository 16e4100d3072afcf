//go:build linux

package probes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestLockProc: a process is locked once; the holder's PID is named; a
// released lock leaves no file and can be taken again.
func TestLockProc(t *testing.T) {
	old := LockDir
	LockDir = t.TempDir()
	t.Cleanup(func() { LockDir = old })

	l, err := lockProc(42, 1000)
	require.NoError(t, err)
	require.NotNil(t, l)
	_, err = lockProc(42, 1000)
	var held *TracedError
	require.ErrorAs(t, err, &held)
	assert.ErrorIs(t, err, ErrTraced)
	assert.Equal(t, os.Getpid(), held.Owner)
	assert.Equal(t, "pid 42 is already traced by another vramprof session (vramprof pid "+strconv.Itoa(os.Getpid())+")", err.Error())

	other, err := lockProc(42, 2000) // the PID reused: another process
	require.NoError(t, err)
	other.release()

	l.release()
	assert.NoFileExists(t, filepath.Join(LockDir, "42-1000.lock"))
	l, err = lockProc(42, 1000)
	require.NoError(t, err)
	l.release()
}

// TestAllSkipsHeld: an --all session leaves a process another session
// traces alone, and says so once.
func TestAllSkipsHeld(t *testing.T) {
	probetest.RequirePrivilege(t)
	lr := startLongrun(t)

	first, err := NewSession(Options{Sink: &memSink{}})
	require.NoError(t, err)
	defer first.Close()
	require.NoError(t, first.Attach(lr.Process.Pid, false))

	// Not AttachAll: that would adopt every CUDA process on the machine.
	var notes []string
	all, err := NewSession(Options{Sink: &memSink{}, All: true, Note: func(m string) { notes = append(notes, m) }})
	require.NoError(t, err)
	defer all.Close()
	pid := uint32(lr.Process.Pid)
	require.NoError(t, all.adopt(pid, nil))
	require.NoError(t, all.adopt(pid, nil))
	assert.Nil(t, all.procs.procs[pid], "not traced")
	assert.Contains(t, all.procs.held, pid)
	assert.Equal(t, []string{"skipping pid " + strconv.Itoa(lr.Process.Pid) +
		": already traced by another vramprof session (vramprof pid " + strconv.Itoa(os.Getpid()) + ")"}, notes, "said once")
}

// TestAllTakesNoLock: a session tracing every process (serve, attach --all)
// never keeps a single-process session out: attach -p succeeds on a process
// it traces, and at its next tick it leaves that process to the new session
// and says so.
func TestAllTakesNoLock(t *testing.T) {
	probetest.RequirePrivilege(t)
	lr := startLongrun(t)
	pid := uint32(lr.Process.Pid)

	// Not AttachAll: that would adopt every CUDA process on the machine.
	var notes []string
	all, err := NewSession(Options{Sink: &memSink{}, All: true, Note: func(m string) { notes = append(notes, m) }})
	require.NoError(t, err)
	defer all.Close()
	require.NoError(t, all.adopt(pid, nil))
	require.NotNil(t, all.procs.procs[pid], "traced by the --all session")
	assert.Zero(t, heldBy(pid, all.procs.procs[pid].startTime), "an --all session holds no lock")

	single, err := NewSession(Options{Sink: &memSink{}})
	require.NoError(t, err)
	defer single.Close()
	require.NoError(t, single.Attach(int(pid), false), "attach -p while --all traces the process")

	require.NoError(t, all.tick())
	assert.True(t, all.procs.procs[pid].exited, "left to the single-process session")
	assert.Contains(t, all.procs.held, pid)
	assert.Equal(t, []string{"skipping pid " + strconv.Itoa(int(pid)) +
		": already traced by another vramprof session (vramprof pid " + strconv.Itoa(os.Getpid()) + ")"}, notes)
}

// startLongrun starts longrun (killed at the test's end) and waits for its
// "ready <pid>" line: the runtime is mapped, its first allocations made.
func startLongrun(t *testing.T) *exec.Cmd {
	t.Helper()
	lr := exec.Command(probetest.Bin(t, "longrun"))
	lr.Env = append(os.Environ(), "VRAMPROF_TRUTH="+filepath.Join(t.TempDir(), "truth.json"), "LONGRUN_MAX_SECONDS=20")
	out, err := lr.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, lr.Start())
	t.Cleanup(func() { _ = lr.Process.Kill(); _ = lr.Wait() })
	_, err = out.Read(make([]byte, 64))
	require.NoError(t, err)
	return lr
}

// useLockDir points LockDir at dir for the test.
func useLockDir(t *testing.T, dir string) {
	t.Helper()
	old := LockDir
	LockDir = dir
	t.Cleanup(func() { LockDir = old })
}

// TestLockRefusesLinks: a link planted at a lock file's name (or as the
// lock directory) is refused with ErrLock, and its target is left as it
// was: the lock is never opened, truncated or written through a link.
func TestLockRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	useLockDir(t, dir)
	target := filepath.Join(t.TempDir(), "precious")
	require.NoError(t, os.WriteFile(target, []byte("keep me\n"), 0o600))
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "42-1000.lock")))

	l, err := lockProc(42, 1000)
	assert.Nil(t, l)
	require.ErrorIs(t, err, ErrLock)
	assert.Contains(t, err.Error(), filepath.Join(dir, "42-1000.lock"))
	got, rerr := os.ReadFile(target)
	require.NoError(t, rerr)
	assert.Equal(t, "keep me\n", string(got), "the link's target is untouched")

	// A hard link to another file: writing the owner would change it.
	require.NoError(t, os.Link(target, filepath.Join(dir, "43-1000.lock")))
	_, err = lockProc(43, 1000)
	require.ErrorIs(t, err, ErrLock)
	got, _ = os.ReadFile(target)
	assert.Equal(t, "keep me\n", string(got))

	// The directory itself a link.
	linkDir := filepath.Join(t.TempDir(), "vramprof")
	require.NoError(t, os.Symlink(t.TempDir(), linkDir))
	useLockDir(t, linkDir)
	_, err = lockProc(42, 1000)
	require.ErrorIs(t, err, ErrLock)
}

// TestLockUnavailableRefuses: when the lock cannot be kept (LockDir cannot
// be made, or is read-only), taking it fails with ErrLock, in one line
// naming the directory: a second session on the same process would
// otherwise run unawares. CheckTraced, which attach -p calls first, says
// so too.
func TestLockUnavailableRefuses(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	useLockDir(t, filepath.Join(file, "vramprof")) // under a plain file
	_, err := lockProc(42, 1000)
	require.ErrorIs(t, err, ErrLock)
	assert.NotContains(t, err.Error(), "\n")
	assert.ErrorIs(t, CheckTraced(os.Getpid()), ErrLock)

	t.Run("read-only", func(t *testing.T) {
		probetest.RequirePrivilege(t) // root writes anywhere but on a read-only mount
		dir := t.TempDir()
		require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY, "size=64k"))
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		useLockDir(t, dir)
		l, err := lockProc(uint32(os.Getpid()), 1000)
		assert.Nil(t, l)
		require.ErrorIs(t, err, ErrLock)
		assert.ErrorIs(t, err, unix.EROFS)
		assert.ErrorIs(t, CheckTraced(os.Getpid()), ErrLock, "attach -p refuses before it traces")
	})
}

// TestAllNeverStopsOwnGuardian: a session tracing every process stops a
// process at its loader's rendezvous when it maps a file not examined yet,
// and a guardian is a fresh exec of vramprof that does. Another session of
// the same vramprof started while the --all session does not read (here:
// never) would have its guardian stopped, and its Close would wait for
// that guardian for ever. Children of vramprof's own process are never
// stopped by its --all sessions.
func TestAllNeverStopsOwnGuardian(t *testing.T) {
	probetest.RequirePrivilege(t)
	lr := startLongrun(t)

	// Not AttachAll: that would adopt every CUDA process on the machine.
	// Adopting one probes the loader, for every process that uses it.
	all, err := NewSession(Options{Sink: &memSink{}, All: true})
	require.NoError(t, err)
	defer all.Close()
	require.NoError(t, all.adopt(uint32(lr.Process.Pid), nil))

	single, err := NewSession(Options{Sink: &memSink{}})
	require.NoError(t, err)
	guards := single.loader.guard.pids()
	closed := make(chan error, 1)
	go func() { closed <- single.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		var sts []string
		for _, g := range guards {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", g))
			sts = append(sts, string(st))
		}
		t.Fatalf("the single session's Close still waits for its guardians after 30 s; guardians: %q", sts)
	}
	require.Len(t, guards, guardianCount, "the single session's guardians")
	var seq uint64
	var st bpfStop
	for it := all.loader.objs.Stopped.Iterate(); it.Next(&seq, &st); {
		assert.NotContains(t, guards, int(st.Tgid), "the --all session stopped a guardian (pid %d)", st.Tgid)
	}
}
