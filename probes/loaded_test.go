//go:build linux

package probes

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/probes/symbolize"
)

// awaitState waits until pid's state (/proc/PID/stat) is, or is not, want.
func awaitState(t *testing.T, pid int, want byte, is bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for (procState(pid) == want) != is {
		require.True(t, time.Now().Before(deadline), "pid %d state %c, want %c: %v", pid, procState(pid), want, is)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDeferredStop: an --all session's stop of a process another session
// holds is left to that session (loaded.go): while it holds the process,
// this session does not resume it; once the process runs again (its
// session resumed it), the stop is forgotten; once its session has let go
// and the process is still stopped, this session resumes it.
func TestDeferredStop(t *testing.T) {
	probetest.RequirePrivilege(t)
	lr := startLongrun(t)
	pid := lr.Process.Pid

	single, err := NewSession(Options{Sink: &memSink{}})
	require.NoError(t, err)
	defer single.Close()
	require.NoError(t, single.Attach(pid, false))

	// Not AttachAll: that would adopt every CUDA process on the machine.
	all, err := NewSession(Options{Sink: &memSink{}, All: true, Note: func(string) {}})
	require.NoError(t, err)
	defer all.Close()
	require.NoError(t, all.adopt(uint32(pid), nil))
	require.Contains(t, all.procs.held, uint32(pid), "held by the single-process session")

	// Resumed by the session that holds it: forgotten.
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	awaitState(t, pid, 'T', true)
	all.deferStop(uint32(pid), 1)
	require.NoError(t, all.resumeDeferred())
	assert.Len(t, all.loads.deferred, 1, "held and stopped: left to its session")
	assert.Equal(t, byte('T'), procState(pid), "not resumed while held")
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	awaitState(t, pid, 'T', false)
	require.NoError(t, all.resumeDeferred())
	assert.Empty(t, all.loads.deferred, "running again: forgotten")

	// Its session lets go while it is stopped: resumed here.
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	awaitState(t, pid, 'T', true)
	all.deferStop(uint32(pid), 2)
	require.NoError(t, single.Close())
	require.NoError(t, all.resumeDeferred())
	assert.Empty(t, all.loads.deferred)
	awaitState(t, pid, 'T', false)
}

// TestOverlayFileKnown: on overlayfs a page fault carries the key of the
// file underneath while stat(2) gives the overlay's (loaded.go): a file
// examined through the overlay must stop nobody afterwards. The control:
// with only stat's key in known_files, as before realKey, the same fault
// makes the process pending.
func TestOverlayFileKnown(t *testing.T) {
	probetest.RequirePrivilege(t)
	lower, merged := probetest.Overlay(t)
	require.NoError(t, os.WriteFile(filepath.Join(lower, "lib.so"), make([]byte, 3*4096), 0o644))
	path := filepath.Join(merged, "lib.so")
	over, under := statKey(t, path), statKey(t, filepath.Join(lower, "lib.so"))
	require.NotEqual(t, over, under, "the premise: stat through the overlay gives another device")

	s, err := NewSession(Options{Sink: &memSink{}, All: true, Note: func(string) {}})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.watchMappings())

	// A child that maps and reads the file's first page at each line on
	// its stdin; everything it maps besides is examined first.
	child := probetest.Pythons(t)[0].Command(context.Background(), "-c", `import mmap, sys
print("ready", flush=True)
for _ in sys.stdin:
    with open(sys.argv[1], "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        m[0]
        m.close()
    print("done", flush=True)`, path)
	in, err := child.StdinPipe()
	require.NoError(t, err)
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "child ready")
	pid := uint32(child.Process.Pid)
	maps, err := symbolize.ReadMaps(int(pid))
	require.NoError(t, err)
	for _, m := range maps {
		if m.Path != "" && m.Path[0] == '/' && !m.Deleted {
			p := fmt.Sprintf("/proc/%d/root%s", pid, m.Path)
			s.examined(statKey(t, p), p, false)
		}
	}
	pending := func() bool {
		_ = s.loader.objs.Pending.Delete(pid)
		_, err := in.Write([]byte("go\n"))
		require.NoError(t, err)
		require.True(t, lines.Scan(), "child done")
		var v uint8
		return s.loader.objs.Pending.Lookup(pid, &v) == nil
	}

	s.loads.known[over] = true // as examined put it before realKey
	require.NoError(t, s.loader.objs.KnownFiles.Update(bpfFileKey{Dev: over.Dev, Ino: over.Inode}, bpfKnownKNOWN_EXAMINED, ebpf.UpdateAny))
	assert.True(t, pending(), "control: with stat's key only, the fault makes the child pending")

	delete(s.loads.known, over)
	s.examined(over, path, false)
	var v bpfKnown
	assert.NoError(t, s.loader.objs.KnownFiles.Lookup(bpfFileKey{Dev: under.Dev, Ino: under.Inode}, &v), "the key underneath is known")
	assert.False(t, pending(), "examined through the overlay: the fault stops nobody")
}

// statKey is the file key stat(2) gives for path.
func statKey(t *testing.T, path string) fileKey {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st), path)
	return fileKey{Dev: st.Dev, Inode: st.Ino}
}

// TestTouchFirstPage: realKey's fault is taken only on a file it can map
// and read; an empty file would fault with SIGBUS, so it is not mapped.
func TestTouchFirstPage(t *testing.T) {
	dir := t.TempDir()
	for name, size := range map[string]int{"empty": 0, "one byte": 1, "two pages": 8192} {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, make([]byte, size), 0o644))
		f, err := os.Open(p)
		require.NoError(t, err)
		assert.Equal(t, size > 0, touchFirstPage(f), name)
		require.NoError(t, f.Close())
	}
}
