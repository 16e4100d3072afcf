//go:build linux

package probes

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

// TestAllNamesGoneProcess: under an --all session (serve), a process that
// maps a runtime probed already is not stopped, and it can be gone before
// the reader reads its first record (a short job, a reader behind): its
// Process record still names it, from its mapping's record (REC_MAPPED):
// its command line, start time, parent and cgroup (its parent's), and its
// Library record names the runtime. Without that it had neither, and its
// calls were counted under a process with no command (command="" under
// serve).
func TestAllNamesGoneProcess(t *testing.T) {
	probetest.RequirePrivilege(t)
	first := startLongrun(t)

	// Not AttachAll: that would adopt every CUDA process on the machine.
	// Adopting one probes the runtime (and its files are examined).
	sink := &memSink{}
	all, err := NewSession(Options{Sink: sink, All: true})
	require.NoError(t, err)
	defer all.Close()
	require.NoError(t, all.adopt(uint32(first.Process.Pid), nil))

	// The reader does not run until the second process is gone.
	truthPath := filepath.Join(t.TempDir(), "truth.json")
	second := exec.Command(probetest.Bin(t, "longrun"), "--tag", "gone-process")
	second.Env = append(os.Environ(), "VRAMPROF_TRUTH="+truthPath, "LONGRUN_MAX_SECONDS=20", "LONGRUN_PAUSE_MS=1")
	out2, err := second.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, second.Start())
	t.Cleanup(func() { _ = second.Process.Kill() })
	lines := bufio.NewScanner(out2)
	require.True(t, lines.Scan(), "ready")
	pid := second.Process.Pid
	start, err := procStartTime(pid)
	require.NoError(t, err)
	require.NoError(t, second.Process.Signal(syscall.SIGUSR1))
	for lines.Scan() && lines.Text() != "done" {
	}
	require.NoError(t, second.Process.Signal(syscall.SIGTERM))
	require.NoError(t, second.Wait())
	self, err := procOf(os.Getpid())
	require.NoError(t, err)

	require.NoError(t, all.drain())
	var proc *event.Process
	for _, p := range sink.procs {
		if p.PID == uint32(pid) {
			proc = p
		}
	}
	require.NotNil(t, proc, "a Process record for the gone pid %d", pid)
	assert.Equal(t, second.Args, proc.Command, "command line")
	assert.Equal(t, start, proc.Start, "start time")
	assert.Equal(t, uint32(os.Getpid()), proc.PPID, "parent")
	assert.Equal(t, procCgroup(self), proc.Cgroup, "cgroup: its parent's")
	var libs []string
	for _, l := range sink.libs {
		if l.PID == uint32(pid) {
			libs = append(libs, filepath.Base(l.Path))
		}
	}
	assert.Contains(t, libs, "libcudart.so.12")

	truth := probetest.MustReadTruth(t, truthPath)
	require.NotNil(t, truth.Preexisting)
	want := truth.Preexisting.Allocations // preload's, before phase 2
	for _, c := range truth.Calls {
		if c.API == "cudaMalloc" {
			want++
		}
	}
	var got uint64
	for _, e := range sink.events {
		if e.PID == uint32(pid) && e.API == event.APICudaMalloc {
			got++
		}
	}
	assert.Equal(t, want, got, "cudaMalloc calls of the gone process")
	assert.Zero(t, sink.lost, "lost records")
}

// TestAllNamesExitingProcess: a process an --all session describes while it
// exits (its maps read before, its /proc entries after its exit: a short
// job under serve) shows no command line and the root cgroup there. Its
// Process record has the command line its mapping's record carried and its
// parent's cgroup (this test's), not the executable's name and "/" (serve
// then labelled it command="wrapper", cgroup="/").
func TestAllNamesExitingProcess(t *testing.T) {
	probetest.RequirePrivilege(t)
	sink := &memSink{}
	all, err := NewSession(Options{Sink: sink, All: true})
	require.NoError(t, err)
	defer all.Close()

	pid := startZombie(t)

	args := []string{"fleetjob", "--step"} // what its REC_MAPPED record said
	_, err = all.track(uint32(pid), nil, args)
	require.NoError(t, err)
	self, err := procOf(os.Getpid())
	require.NoError(t, err)
	require.Len(t, sink.procs, 1)
	assert.Equal(t, args, sink.procs[0].Command, "command line: the record's")
	assert.Equal(t, procCgroup(self), sink.procs[0].Cgroup, "cgroup: its parent's")
}
