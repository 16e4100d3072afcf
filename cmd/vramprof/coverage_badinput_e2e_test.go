//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// The coverage issue's awkward targets. Two are elsewhere:
//   - a runtime unloaded and loaded again: the reload scenario in
//     TestRunCoverageScenarios (dlclose really unmaps it; the second dlopen
//     maps it at another address);
//   - PID reuse / exits: workers' children exit before their parent, and
//     each child's figures are checked against its own truth file by pid in
//     TestRunCoverageScenarios.

// TestRunExecMidRun runs a shell that works a while and then execs into a
// scenario (same pid, a new image): every call of the exec'd program is
// traced.
func TestRunExecMidRun(t *testing.T) {
	probetest.RequirePrivilege(t)
	t.Parallel()
	bin := probetest.Bin(t, "steady")
	tmp := t.TempDir()
	truthPath := filepath.Join(tmp, "truth.json")
	dir := filepath.Join(tmp, "out")
	// Builtins only before the exec: no child process, so the run has one
	// process, the shell's, which becomes steady.
	script := `i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; exec "$0"`
	r := vramprof(t, execOpts{dir: tmp, env: []string{"VRAMPROF_TRUTH=" + truthPath}},
		"run", "-o", dir, "--", "sh", "-c", script, bin)
	require.Equal(t, 0, r.code, "exit code; stderr:\n%s", r.stderr)
	truth := probetest.MustReadTruth(t, truthPath)
	rep := mustReadReport(t, filepath.Join(dir, "report.json"))
	checkReport(t, rep, truth)
	checkProfile(t, "steady", filepath.Join(dir, "profile.pb.gz"), truth)
	t.Run("image", func(t *testing.T) {
		cov := mustReadCovReport(t, filepath.Join(dir, "report.json"))
		if assert.Len(t, cov.Processes, 1) {
			assert.Equal(t, bin, cov.Processes[0].Exe, "the process's image after the exec")
		}
	})
}

// TestAttachOtherMountNamespace attaches to a process whose executable and
// CUDA libraries live on a tmpfs mounted in its own mount namespace only:
// the paths in its /proc/PID/maps do not exist in vramprof's namespace, so
// they must be reached through /proc/PID/root. Every call after the attach
// is traced.
func TestAttachOtherMountNamespace(t *testing.T) {
	probetest.RequirePrivilege(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		skipOrFail(t, "needs unshare (util-linux)")
	}
	t.Parallel()
	bin, rt, drv := probetest.Bin(t, "longrun"), probetest.Lib(t, "libcudart.so.12"), probetest.Lib(t, "libcuda.so.1")
	// An empty directory here; inside the namespace a tmpfs over it holds
	// bin/longrun and lib/ (longrun's RUNPATH is $ORIGIN/../lib).
	ns := filepath.Join(t.TempDir(), "ns")
	require.NoError(t, os.Mkdir(ns, 0o755))
	script := `set -e; mount -t tmpfs vramprof-ns "$1"; mkdir "$1/bin" "$1/lib"
cp "$2" "$1/bin/longrun"; cp "$3" "$4" "$1/lib/"; exec "$1/bin/longrun"`
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", ns, bin, rt, drv)
	lr := startLongrunCmd(t, cmd)

	inNS := filepath.Join(ns, "lib", "libcudart.so.12")
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", lr.pid))
	require.NoError(t, err)
	require.Contains(t, string(maps), inNS, "the target maps the runtime from its namespace's tmpfs")
	_, err = os.Stat(inNS)
	require.True(t, errors.Is(err, os.ErrNotExist), "%s must not exist in vramprof's namespace (stat: %v)", inNS, err)

	a := startAttach(t, lr.pid)
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
	lr.expect(t, "done")
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-lr.exit:
		require.NoError(t, err, "longrun exits 0 on SIGTERM")
	case <-time.After(10 * time.Second):
		t.Fatal("longrun did not exit on SIGTERM")
	}
	require.Equal(t, 0, a.wait(t, 20*time.Second), "exit code; stderr:\n%s", a.stderr.String())

	truth := probetest.MustReadTruth(t, lr.truth)
	require.Equal(t, uint32(lr.pid), truth.PID)
	rep := mustReadCovReport(t, filepath.Join(a.dir, "report.json"))
	tt, want := rep.Totals, truth.Totals
	assert.Equal(t, want.Allocations, tt.Allocations, "allocations")
	assert.Equal(t, want.Frees, tt.Frees, "frees")
	assert.Equal(t, want.UnknownFrees, tt.UnknownFrees, "unknown_frees")
	assert.Equal(t, want.AllocatedBytes, tt.AllocatedBytes, "allocated_bytes")
	assert.Equal(t, want.PeakBytes, tt.PeakBytes, "peak_bytes")
	assert.Equal(t, want.LiveBytesAtEnd, tt.LiveBytesAtEnd, "live_bytes_at_end")
	assert.Zero(t, tt.LostEvents, "lost_events")

	var found bool
	for _, l := range rep.Libraries {
		if filepath.Base(l.Path) == "libcudart.so.12" && l.PID == uint32(lr.pid) {
			found = true
			assert.Contains(t, l.Symbols, "cudaMalloc")
			assert.True(t, strings.HasPrefix(l.Path, ns), "the path as the target sees it: %q", l.Path)
		}
	}
	assert.True(t, found, "libraries list the namespace's libcudart.so.12; got %+v", rep.Libraries)
	// Stacks were symbolized through /proc/PID/root too.
	full := mustReadReport(t, filepath.Join(a.dir, "report.json"))
	var fns []string
	for _, p := range full.Processes {
		for _, s := range p.LiveAtEndStacks {
			fns = append(fns, attribute(s.Frames))
		}
	}
	assert.Contains(t, fns, "leaky_step", "live-at-end stacks are symbolized")
}
