//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestRunLoaderProbeOnlyTree: under run, only the command's process tree
// traps into the loader's rendezvous probe, and all of it does. The kernel's
// own count of the session's loader_state runs (BPF stats, the program found
// by id among vramprof's descriptors: other sessions on this host have their
// own) is read while the tree waits at a gate:
//   - beside the session, dlopen_loop (no relation to the command) maps and
//     unmaps a library 2000 times, 4 rendezvous a round: the count must not
//     move (a probe without a process filter ran 2 + 4*2000 = 8002 times);
//   - in the tree, the shell forks and execs dlopen_loop, whose forked
//     child (no exec) loads 100 times: 2 runs at its start-up + 4*100 =
//     402, exactly;
//   - once those have exited (an inherited probe's copies go with their
//     tasks), dlopen_loop again, exec'd, 50 rounds: 2 + 4*50 = 202;
//   - then launcher forks and execs two ranks whose runtime dlopen()s the
//     driver, and workers forks four workers: each process's figures are
//     exact against its own truth.
func TestRunLoaderProbeOnlyTree(t *testing.T) {
	probetest.RequirePrivilege(t)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	require.NoError(t, err, "enable BPF run statistics")
	defer stats.Close()
	loop, launcher, workers := probetest.Bin(t, "dlopen_loop"), probetest.Bin(t, "launcher"), probetest.Bin(t, "workers")
	const rounds = "2000"
	alone, err := exec.Command(loop, rounds).Output()
	require.NoError(t, err, "dlopen_loop alone")

	tmp := t.TempDir()
	gate, base, dir := filepath.Join(tmp, "gate"), filepath.Join(tmp, "truth"), filepath.Join(tmp, "out")
	require.NoError(t, syscall.Mkfifo(gate, 0o600))
	// The shell waits at the gate (blocked opening it) before its tree
	// does anything; run's command is probed before it runs at all.
	script := `read x < "$0" && "$4" 100 libanl.so.1 fork && read x < "$0" && "$4" 50 && read x < "$0" && ` +
		`VRAMPROF_TRUTH="$1.l" "$2" && VRAMPROF_TRUTH="$1.w" exec "$3"`
	cmd := exec.Command(binPath, "run", "-q", "-o", dir, "--", "/bin/sh", "-c", script, gate, base, launcher, workers, loop)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	sh := waitGated(t, cmd.Process.Pid, &stderr)
	prog := loaderProgram(t, cmd.Process.Pid)
	before := runCount(t, prog)
	beside, err := exec.Command(loop, rounds).Output()
	require.NoError(t, err, "dlopen_loop beside the session")
	after := runCount(t, prog)
	t.Logf("dlopen_loop alone:              %s", strings.TrimSpace(string(alone)))
	t.Logf("dlopen_loop beside run's tree:  %s", strings.TrimSpace(string(beside)))
	assert.Equal(t, before, after, "loader_state runs while only a process outside the tree loaded libraries")

	// In the tree, past the gate until dlopen_loop has said it is done
	// and the shell waits at the gate again.
	phase := func(out string) uint64 {
		openGate(t, gate)
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stdout.String(), out); {
			require.True(t, time.Now().Before(deadline), "no %q from the tree; stderr:\n%s", out, stderr.String())
			time.Sleep(20 * time.Millisecond)
		}
		require.Equal(t, sh, waitGated(t, cmd.Process.Pid, &stderr), "the shell at its gate again")
		return runCount(t, prog)
	}
	forked := phase("rounds=100 ")
	assert.Equal(t, after+2+4*100, forked, "loader_state runs: dlopen_loop's start-up and its forked child's 100 rounds")
	inTree := phase("rounds=50 ")
	assert.Equal(t, forked+2+4*50, inTree, "loader_state runs: dlopen_loop's start-up and its 50 rounds")

	openGate(t, gate)
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("vramprof run did not end; stderr:\n%s", stderr.String())
	}
	require.NoError(t, err, "vramprof run; stderr:\n%s", stderr.String())
	assert.Greater(t, runCount(t, prog), inTree, "loader_state runs in the tree")

	// Each process against its own truth: the workers' root is the shell
	// (it exec()ed workers), the launcher its child.
	rep := mustReadCovReport(t, filepath.Join(dir, "report.json"))
	assert.Zero(t, rep.Totals.LostEvents, "lost_events")
	trees := truthFiles(t, base+".l", mustReadCovTruth(t, base+".l"))
	for pid, tr := range truthFiles(t, base+".w", mustReadCovTruth(t, base+".w")) {
		trees[pid] = tr
	}
	require.Len(t, trees, 3+5, "truth files: launcher and its 2 ranks, workers and its 4 workers")
	require.Contains(t, trees, uint32(sh), "the shell became workers")
	byPID := map[uint32]covProcess{}
	for _, p := range rep.Processes {
		byPID[p.PID] = p
	}
	var want, got []uint32
	for pid := range trees {
		want = append(want, pid)
	}
	loops := 0
	for pid, p := range byPID {
		if filepath.Base(p.Exe) == "dlopen_loop" && trees[pid] == nil {
			loops++
			continue
		}
		got = append(got, pid)
	}
	assert.Equal(t, 3, loops, "dlopen_loop processes in report.json (the forked loop's 2, the exec'd one)")
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	require.Equal(t, want, got, "report.json processes are the tree's")
	for pid, tr := range trees {
		checkProcessFigures(t, byPID[pid], tr)
	}
}

// openGate lets the shell past its gate.
func openGate(t *testing.T, gate string) {
	t.Helper()
	w, err := os.OpenFile(gate, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = w.WriteString("go\n")
	require.NoError(t, err)
	require.NoError(t, w.Close())
}

// waitGated returns the pid of the shell vramprof (pid) runs once it is
// blocked opening the gate: the session is live and the tree idle.
func waitGated(t *testing.T, pid int, stderr *syncBuffer) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		require.True(t, time.Now().Before(deadline), "the command did not reach its gate; stderr:\n%s", stderr.String())
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, c := range strings.Fields(string(b)) {
				comm, _ := os.ReadFile("/proc/" + c + "/comm")
				sc, _ := os.ReadFile("/proc/" + c + "/syscall")
				// openat (257) or open (2) on x86-64: blocked at the FIFO.
				if strings.TrimSpace(string(comm)) == "sh" && (strings.HasPrefix(string(sc), "257 ") || strings.HasPrefix(string(sc), "2 ")) {
					n, err := strconv.Atoi(c)
					require.NoError(t, err)
					return n
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loaderProgram returns the loader_state program vramprof (pid) holds,
// found through its file descriptors: other sessions on this host have
// their own.
func loaderProgram(t *testing.T, pid int) *ebpf.Program {
	t.Helper()
	infos, err := filepath.Glob(fmt.Sprintf("/proc/%d/fdinfo/*", pid))
	require.NoError(t, err)
	for _, f := range infos {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			v, ok := strings.CutPrefix(line, "prog_id:")
			if !ok {
				continue
			}
			id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			require.NoError(t, err, "%s: %q", f, line)
			p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			require.NoError(t, err, "program %d", id)
			info, err := p.Info()
			require.NoError(t, err, "program %d", id)
			if info.Name == "loader_state" {
				t.Cleanup(func() { _ = p.Close() })
				return p
			}
			_ = p.Close()
		}
	}
	t.Fatalf("no loader_state program among vramprof's (pid %d) descriptors", pid)
	return nil
}

// runCount is the kernel's count of the program's runs (BPF stats on).
func runCount(t *testing.T, p *ebpf.Program) uint64 {
	t.Helper()
	st, err := p.Stats()
	require.NoError(t, err, "program stats")
	return st.RunCount
}
