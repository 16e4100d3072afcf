//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// vmRSS reads a process's resident set size in bytes; 0 once it is gone.
func vmRSS(pid int) uint64 {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// dirBytes sums the sizes of the files in dir (not below).
func dirBytes(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	var n int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}

// TestFlightSoak records a churn at the probes' full rate under
// --max-trace 1MiB for VRAMPROF_SOAK_SECONDS (default 60), sampling the
// output directory's size and vramprof's RSS every second: disk stays
// within the budget and one segment, and memory stays flat once warm. Then
// Ctrl-C (SIGINT) ends it, and the outputs say what the flight recorder
// summarised. Figures are logged (go test -v) for the issue.
func TestFlightSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: a minute long; not with -short")
	}
	probetest.RequirePrivilege(t)
	seconds := 60
	if s := os.Getenv("VRAMPROF_SOAK_SECONDS"); s != "" {
		var err error
		seconds, err = strconv.Atoi(s)
		require.NoError(t, err, "VRAMPROF_SOAK_SECONDS")
	}
	const budget = 1 << 20
	dir := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds)*time.Second+5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "run", "-q", "--max-trace", "1MiB", "-o", dir, "--",
		probetest.Bin(t, "bench_pairs"), "1000000000000")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid

	var maxDisk, largest int64
	var rss []uint64 // one sample a second
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 1; i <= seconds; i++ {
		<-tick.C
		disk := dirBytes(dir)
		_, _, big := segmentFiles(t, dir)
		rss = append(rss, vmRSS(pid))
		maxDisk, largest = max(maxDisk, disk), max(largest, big)
		if i%10 == 0 || i == seconds {
			t.Logf("t=%3ds disk %7d B, rss %6d KiB", i, disk, rss[i-1]>>10)
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := cmd.Wait()
	if err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "stderr: %s", stderr.String())
	}
	fr := mustReadJSON[flightReport](t, filepath.Join(dir, "report.json"))
	require.NotNil(t, fr.Run.Flight, "a minute at full rate overflows 1MiB; stderr: %s", stderr.String())
	events := fr.Run.Flight.KeptEvents + fr.Run.Flight.SummarisedEvents
	// Flat: the first half's highest RSS (after warm-up) bounds the second
	// half's. The tracker holds what is live (nothing, here), the recorder
	// its descriptive records; the slack is for the Go heap's swings and the
	// reorder buffer (probes/reorder.go), which on a loaded machine holds up
	// to its window of events (capped at maxHeld, ~90 MB).
	half := len(rss) / 2
	first, second := slices.Max(rss[min(5, half-1):half]), slices.Max(rss[half:])
	t.Logf("%d events in %d s (%.0f events/s); kept %d; disk max %d B (budget %d, largest segment %d); rss max %d KiB in the first half, %d KiB in the second",
		events, seconds, float64(events)/float64(seconds), fr.Run.Flight.KeptEvents, maxDisk, budget, largest, first>>10, second>>10)
	assert.LessOrEqual(t, maxDisk, int64(budget)+largest, "disk: the budget and one segment")
	assert.LessOrEqual(t, second, first+32<<20, "rss grew: %d KiB in the first half, %d KiB in the second", first>>10, second>>10)
}

// TestFlightMoment takes a SIGUSR1 moment report while a flight recorder
// rotates through segments at full rate: the moment reads the segments
// kept then (held open, so deleting one meanwhile is harmless) and
// restores from the oldest one's checkpoint.
func TestFlightMoment(t *testing.T) {
	probetest.RequirePrivilege(t)
	dir := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "run", "-q", "--max-trace", "256KiB", "-o", dir, "--",
		probetest.Bin(t, "bench_pairs"), "1000000000000")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	time.Sleep(3 * time.Second)
	require.NoError(t, cmd.Process.Signal(syscall.SIGUSR1))
	time.Sleep(2 * time.Second)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "stderr: %s", stderr.String())
	}
	moments, err := filepath.Glob(filepath.Join(dir, "moments", "usr1-1-*", "report.json"))
	require.NoError(t, err)
	require.Len(t, moments, 1, "stderr: %s", stderr.String())
	fr := mustReadJSON[flightReport](t, moments[0])
	require.NotNil(t, fr.Run.Flight, "the moment began at a checkpoint")
	assert.NotZero(t, fr.Run.Flight.SummarisedEvents)
	rep := mustReadReport(t, moments[0])
	allocs, frees := val(t, "allocations", rep.Totals.Allocations), val(t, "frees", rep.Totals.Frees)
	// Pairs: at most the one in flight at the moment is live.
	assert.LessOrEqual(t, allocs-frees, uint64(1), "allocations %d, frees %d", allocs, frees)
	assert.Greater(t, allocs, fr.Run.Flight.KeptEvents/2, "the counts cover the summarised events too")
	assert.Zero(t, val(t, "unknown_frees", rep.Totals.UnknownFrees))
}
