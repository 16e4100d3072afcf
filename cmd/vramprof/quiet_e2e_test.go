//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// The target must not notice a library load (probes/preload.go): the
// scenario dlopen_quiet counts the SIGCONT handler's calls and the
// epoll_wait(..., 3000) returns that end with EINTR in a second thread
// while its main thread dlopen()s the runtime by name and the runtime
// dlopen()s the driver: natively both are 0. Stopped at each load, as the
// loader probe did, 3-4 waits ended with EINTR and the handler ran 4 times
// under run.
func TestDlopenNotNoticed(t *testing.T) {
	probetest.RequirePrivilege(t)
	bin := probetest.Bin(t, "dlopen_quiet")

	native := exec.Command(bin)
	out, err := native.Output()
	require.NoError(t, err)
	require.Equal(t, "eintr=0 sigcont=0\n", string(out), "natively")

	t.Run("run", func(t *testing.T) {
		tmp := t.TempDir()
		truth, dir := filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "out")
		r := vramprof(t, execOpts{env: []string{"VRAMPROF_TRUTH=" + truth}}, "run", "-q", "-o", dir, "--", bin)
		require.Equal(t, "eintr=0 sigcont=0\n", r.stdout, "the command's own line; stderr:\n%s", r.stderr)
		assertExact(t, dir, truth, r)
		// Start-up's library load (libc, not examined yet) only.
		require.Equal(t, []int{1}, processStops(t, dir), "stops")
	})

	t.Run("attach --wait", func(t *testing.T) {
		tmp := t.TempDir()
		truth := filepath.Join(tmp, "truth.json")
		target := exec.Command(bin)
		target.Env = append(os.Environ(), "VRAMPROF_TRUTH="+truth, "DLOPEN_QUIET_DELAY_MS=3000")
		var stdout bytes.Buffer
		target.Stdout = &stdout
		require.NoError(t, target.Start())
		done := make(chan error, 1)
		go func() { done <- target.Wait() }()
		t.Cleanup(func() { _ = target.Process.Kill() })
		dir := filepath.Join(tmp, "out")
		var stderr syncBuffer
		attach := exec.Command(binPath, "attach", "--wait", "-p", strconv.Itoa(target.Process.Pid), "-o", dir)
		attach.Stderr = &stderr
		require.NoError(t, attach.Start())
		t.Cleanup(func() { _ = attach.Process.Kill() })
		// Live once it says so; the target's dlopen is 3 s away.
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(stderr.String(), "watching pid"); {
			require.True(t, time.Now().Before(deadline), "attach --wait not live; stderr:\n%s", stderr.String())
			time.Sleep(20 * time.Millisecond)
		}
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("dlopen_quiet did not end")
		}
		code := 0
		if err := attach.Wait(); err != nil {
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			code = ee.ExitCode()
		}
		require.Equal(t, "eintr=0 sigcont=0\n", stdout.String(), "attached to")
		assertExact(t, dir, truth, result{code: code, stderr: stderr.String()})
		require.Equal(t, []int{0}, processStops(t, dir), "stops")
	})
}

// TestDlopenOffPathStopsOnce: a runtime dlopen()ed by a path no search
// finds (dlopen_runtime builds it at run time, and has no RUNPATH) is still
// traced exactly: the load that maps it stops the process, once, and the
// driver the runtime then loads from its own RUNPATH is probed at that
// stop, before it is mapped.
func TestDlopenOffPathStopsOnce(t *testing.T) {
	probetest.RequirePrivilege(t)
	tmp := t.TempDir()
	truth, dir := filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "out")
	r := vramprof(t, execOpts{env: []string{"VRAMPROF_TRUTH=" + truth}}, "run", "-q", "-o", dir, "--", probetest.Bin(t, "dlopen_runtime"))
	assertExact(t, dir, truth, r)
	stops := processStops(t, dir)
	require.Len(t, stops, 1, "one process")
	// Start-up: the exec (ptrace, not counted) and the initial load of
	// libc (one stop: libc was not examined); then the runtime's load.
	require.Equal(t, 2, stops[0], "stops: start-up's library load and the runtime's")
}

// processStops reads processes[].stops from report.json.
func processStops(t *testing.T, dir string) []int {
	t.Helper()
	type rep struct {
		Processes []struct {
			Stops *int `json:"stops"`
		} `json:"processes"`
	}
	var out []int
	for _, p := range mustReadJSON[rep](t, filepath.Join(dir, "report.json")).Processes {
		require.NotNil(t, p.Stops, "processes[].stops missing")
		out = append(out, *p.Stops)
	}
	return out
}

// TestQuietBesideServe: serve stops a process that maps a file serve has
// not examined, and leaves its resumption to the run session that holds
// the process (the per-process lock). The run, quiet, did not stop it (it
// had probed the runtime and the driver before they were loaded), so it
// resumes serve's stop itself (probes takeDeferred): told by serve's
// marker, or, from a serve that leaves none (older versions), by finding
// the process stopped at the loader's rendezvous. Without that the
// process stayed stopped for as long as the run waited for it to exit:
// for ever. The scenario runs from a private copy of its executable and
// libraries, files serve has never examined, so that serve stops it at
// both loads (the runtime's and the driver's).
func TestQuietBesideServe(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, markers := range []bool{true, false} {
		t.Run(fmt.Sprintf("markers=%v", markers), func(t *testing.T) {
			var env []string
			if !markers {
				env = []string{"VRAMPROF_TEST_NO_DEFER_MARKERS=1"}
			}
			cmd, done, stderr := startServeEnv(t, env)
			defer stopServe(t, cmd, done, stderr)
			bin := privateCopy(t, "dlopen_quiet")
			for i := 0; i < 2; i++ {
				tmp := t.TempDir()
				truth, dir := filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "out")
				r := vramprof(t, execOpts{env: []string{"VRAMPROF_TRUTH=" + truth}}, "run", "-q", "-o", dir, "--", bin)
				assertExact(t, dir, truth, r)
			}
		})
	}
}

// privateCopy copies the scenario name and the fake runtime and driver
// into a fresh bin/ and lib/ (its RUNPATH is $ORIGIN/../lib), and returns
// the executable's path: new files, that no session has examined.
func privateCopy(t *testing.T, name string) string {
	t.Helper()
	root := t.TempDir()
	src := filepath.Dir(filepath.Dir(probetest.Bin(t, name)))
	for _, rel := range []string{"bin/" + name, "lib/libcudart.so.12", "lib/libcuda.so.1"} {
		b, err := os.ReadFile(filepath.Join(src, rel))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(rel)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, rel), b, 0o755))
	}
	return filepath.Join(root, "bin", name)
}
