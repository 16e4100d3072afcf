//go:build linux

package main

import (
	"bufio"
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
)

// TestRecorderKilled SIGKILLs `vramprof run` a while after the last
// allocation: the trace it leaves has no End, but holds every call, the
// last one included (the trace writer holds an event back in case the next
// one folds into it, and the flush each second writes it out), and reports.
func TestRecorderKilled(t *testing.T) {
	probetest.RequirePrivilege(t)
	t.Parallel()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "out")
	cmd := exec.Command(binPath, "run", "-q", "-o", dir, "--", probetest.Bin(t, "longrun"))
	cmd.Env = append(os.Environ(), "LONGRUN_MAX_SECONDS=20", "VRAMPROF_TRUTH="+filepath.Join(tmp, "truth.json"))
	cmd.Dir = tmp
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	target := 0
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if target > 0 {
			_ = syscall.Kill(target, syscall.SIGKILL)
		}
	})
	lines := bufio.NewScanner(stdout)
	next := func(prefix string) string {
		t.Helper()
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), prefix) {
				return lines.Text()
			}
		}
		t.Fatalf("longrun never printed %q", prefix)
		return ""
	}
	target, err = strconv.Atoi(strings.TrimPrefix(next("ready "), "ready "))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(target, syscall.SIGUSR1))
	next("done")
	// Until a flush has put the whole run on disk (once a second): what
	// the trace holds so far, read as report does (exit 2, a trace without
	// its End, with the figures of what it holds).
	trace := filepath.Join(dir, "trace.vpt")
	require.Eventually(t, func() bool {
		r := vramprof(t, execOpts{dir: tmp}, "report", trace, "--format", "json")
		var rep Report
		if json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.Totals.Frees == nil {
			return false
		}
		return *rep.Totals.Frees == 41
	}, 20*time.Second, 100*time.Millisecond, "the trace on disk never held the run's 41 frees")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	out := filepath.Join(tmp, "replay")
	r := vramprof(t, execOpts{dir: tmp}, "report", filepath.Join(dir, "trace.vpt"), "-o", out)
	rep := mustReadReport(t, filepath.Join(out, "report.json"))
	assert.False(t, rep.Run.EndedCleanly, "no End record; stderr:\n%s", r.stderr)
	// 3 preloaded buffers, then 20 iterations of 3 allocations and 2 frees,
	// then one more free.
	assert.Equal(t, uint64(63), val(t, "allocations", rep.Totals.Allocations))
	assert.Equal(t, uint64(41), val(t, "frees", rep.Totals.Frees))

	// No gate passes on it, far as its figures are below the limit: they
	// stop at the kill. Nor on the report.json made from it.
	for _, in := range []string{dir, filepath.Join(out, "report.json")} {
		ck := vramprof(t, execOpts{dir: tmp}, "check", "--max-peak", "1GiB", in)
		assert.Equal(t, 2, ck.code, "check %s: no verdict; stdout:\n%s", in, ck.stdout)
		assert.Contains(t, ck.stdout, "vramprof check: UNKNOWN: the recording is incomplete (cut short: ")
	}
}
