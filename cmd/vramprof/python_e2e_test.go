//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestRunPython profiles a real CPython that loads the CUDA runtime late,
// through ctypes (dlopen), as `import torch` does, and compares every total
// with the script's own record of what it allocated. The interpreter is
// reached the way users reach it (here through pyenv's shim: a shell script
// that execs the real interpreter), so the run also crosses execs.
func TestRunPython(t *testing.T) {
	probetest.RequirePrivilege(t)
	python := requirePython3(t)
	t.Parallel()
	tmp := t.TempDir()
	truthPath := filepath.Join(tmp, "truth.json")
	dir := filepath.Join(tmp, "out")
	script := filepath.Join(probetest.Root(), "testdata", "python", "alloc.py")
	r := vramprof(t, execOpts{dir: tmp, env: []string{
		"VRAMPROF_TRUTH=" + truthPath,
		"FAKECUDA_LIB=" + probetest.Lib(t, "libcudart.so.12"),
	}}, "run", "-o", dir, "--", python, script)
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	truth := probetest.MustReadTruth(t, truthPath)
	require.NotZero(t, truth.Totals.Allocations)

	rep := mustReadReport(t, filepath.Join(dir, "report.json"))
	for name, pair := range map[string][2]uint64{
		"allocations":        {truth.Totals.Allocations, val(t, "allocations", rep.Totals.Allocations)},
		"frees":              {truth.Totals.Frees, val(t, "frees", rep.Totals.Frees)},
		"failed_allocations": {truth.Totals.FailedAllocations, val(t, "failed_allocations", rep.Totals.FailedAllocations)},
		"allocated_bytes":    {truth.Totals.AllocatedBytes, val(t, "allocated_bytes", rep.Totals.AllocatedBytes)},
		"peak_bytes":         {truth.Totals.PeakBytes, val(t, "peak_bytes", rep.Totals.PeakBytes)},
		"live_bytes_at_end":  {truth.Totals.LiveBytesAtEnd, val(t, "live_bytes_at_end", rep.Totals.LiveBytesAtEnd)},
	} {
		assert.Equal(t, pair[0], pair[1], name)
	}
	assert.Zero(t, val(t, "lost_events", rep.Totals.LostEvents))
	checkReplay(t, dir)
}

// TestAttachPythonSites attaches to a running CPython trainer and runs the
// same program under run: both name the same Python sites (function,
// file:line) for every allocation, and none is left without Python frames.
// Before, attach placed its probes before the BPF walker knew the
// interpreter, and the calls in between had native frames only
// ("0x7f... (libffi.so.8)").
func TestAttachPythonSites(t *testing.T) {
	probetest.RequirePrivilege(t)
	python := requirePython3(t)
	script := filepath.Join(probetest.Root(), "testdata", "python", "train_long.py")
	lib := "FAKECUDA_LIB=" + probetest.Lib(t, "libcudart.so.12")

	// attach: to the trainer once it has loaded the runtime and runs.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Its 3 seconds count from when the attach is live, however long
	// attaching takes on a loaded host.
	trainer := exec.CommandContext(ctx, python, script, "3", "go")
	trainer.Env = append(os.Environ(), lib)
	out, err := trainer.StdoutPipe()
	require.NoError(t, err)
	in, err := trainer.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, trainer.Start())
	t.Cleanup(func() { _ = trainer.Process.Kill(); _ = trainer.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	a := startAttach(t, trainer.Process.Pid)
	_, err = in.Write([]byte("go\n"))
	require.NoError(t, err)
	require.Equal(t, 0, a.wait(t, 30*time.Second), "stderr:\n%s", a.stderr.String())
	attached := pythonSites(t, filepath.Join(a.dir, "profile.pb.gz"))

	dir := filepath.Join(t.TempDir(), "run")
	r := vramprof(t, execOpts{dir: t.TempDir(), env: []string{lib}}, "run", "-q", "-o", dir, "--", python, script, "0.5")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	ran := pythonSites(t, filepath.Join(dir, "profile.pb.gz"))

	require.Len(t, ran, 2, "run: the two lines of alloc: %v", ran)
	assert.Equal(t, ran, attached)
}

// pythonSites is the set of Python stacks ("func file:line <- ...") of the
// allocations in a profile; a stack without a Python frame is "native".
func pythonSites(t *testing.T, path string) map[string]bool {
	t.Helper()
	p := mustParseProfile(t, path)
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "alloc_objects" {
			idx = i
		}
	}
	require.GreaterOrEqual(t, idx, 0)
	sites := map[string]bool{}
	for _, s := range p.Sample {
		if s.Value[idx] == 0 {
			continue
		}
		var frames []string
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function != nil && strings.HasSuffix(l.Function.Filename, ".py") {
					frames = append(frames, fmt.Sprintf("%s %s:%d", l.Function.Name, filepath.Base(l.Function.Filename), l.Line))
				}
			}
		}
		if len(frames) == 0 {
			frames = []string{"native"}
		}
		sites[strings.Join(frames, " <- ")] = true
	}
	return sites
}

// requirePython3 is the path of python3, or skips the test without one
// (fails under CI=true: the CPython tests must run).
func requirePython3(t *testing.T) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 not found; CI=true: the CPython test must run")
		}
		t.Skip("python3 not found")
	}
	return python
}
