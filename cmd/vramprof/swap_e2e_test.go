//go:build linux

package main

import (
	"bufio"
	"bytes"
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

	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/probes/probetest"
)

// TestRunOutputSwappedForLink: `vramprof run -o DIR` whose DIR is renamed
// and replaced by a link while the command runs (to a directory whose
// trace.vpt links to a secret) reads back the trace it wrote: the outputs
// go to the directory it opened, under its new name, with the command's
// own figures (longrun's truth: what phase 1 left, plus phase 2); the exit
// code is the command's; nothing of the secret is printed and nothing is
// written where the link leads.
func TestRunOutputSwappedForLink(t *testing.T) {
	probetest.RequirePrivilege(t)
	tmp := t.TempDir()
	secret := filepath.Join(tmp, "shadow")
	require.NoError(t, os.WriteFile(secret, []byte("root:$6$s3cr3t:19000:0:99999:7:::\n"), 0o600))
	planted := filepath.Join(tmp, "planted")
	require.NoError(t, os.Mkdir(planted, 0o755))
	require.NoError(t, os.Symlink(secret, filepath.Join(planted, recorder.TraceFile)))
	dir := filepath.Join(tmp, "out")
	truth := filepath.Join(tmp, "truth.json")

	cmd := exec.Command(binPath, "run", "-q", "-o", dir, "--", probetest.Bin(t, "longrun"))
	cmd.Env = append(os.Environ(), "VRAMPROF_TRUTH="+truth, "LONGRUN_MAX_SECONDS=30")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(out)
	next := func(prefix string) string {
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), prefix) {
				return lines.Text()
			}
		}
		t.Fatalf("longrun ended before printing %q; stderr:\n%s", prefix, stderr.String())
		return ""
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(next("ready"), "ready")))
	require.NoError(t, err)

	moved := dir + ".moved"
	require.NoError(t, os.Rename(dir, moved))
	require.NoError(t, os.Symlink(planted, dir))
	require.NoError(t, syscall.Kill(pid, syscall.SIGUSR1)) // phase 2
	next("done")
	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM)) // longrun exits 0
	for lines.Scan() {
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("vramprof run did not end")
	}
	require.NoError(t, err, "the command's exit code (0); stderr:\n%s", stderr.String())
	assert.NotContains(t, stderr.String(), "s3cr3t")
	assert.NotContains(t, stderr.String(), "root:")

	tr := probetest.MustReadTruth(t, truth)
	require.NotNil(t, tr.Preexisting)
	rep := mustReadJSON[struct {
		Totals struct {
			Allocations uint64 `json:"allocations"`
		} `json:"totals"`
	}](t, filepath.Join(moved, recorder.JSONFile))
	assert.Equal(t, tr.Totals.Allocations+tr.Preexisting.Allocations, rep.Totals.Allocations, "the command's own recording")
	assert.NoFileExists(t, filepath.Join(planted, recorder.JSONFile))
	got, err := os.ReadFile(secret)
	require.NoError(t, err)
	assert.Equal(t, "root:$6$s3cr3t:19000:0:99999:7:::\n", string(got))
}
