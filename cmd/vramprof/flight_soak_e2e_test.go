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

// procMem reads a process's resident set size and the anonymous part of it
// (the Go heap and stacks; the rest is files: the binary, and the BPF ring
// buffer, whose pages count twice as the kernel maps them twice), in
// bytes; 0 once it is gone.
func procMem(pid int) (rss, anon uint64) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	kb := func(s string) uint64 {
		n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(s), " kB"), 10, 64)
		return n << 10
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			rss = kb(rest)
		} else if rest, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			anon = kb(rest)
		}
	}
	return rss, anon
}

// dirBytes sums the sizes of the files in dir (not below), and returns the
// largest trace segment's. A file the recorder deletes meanwhile (a segment
// rotated out) is skipped: it was in an hour's soak.
func dirBytes(dir string) (total, largestSegment int64) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			total += info.Size()
			if ok, _ := filepath.Match("trace-*.vpt", e.Name()); ok {
				largestSegment = max(largestSegment, info.Size())
			}
		}
	}
	return total, largestSegment
}

// soakAnon bounds the soak's anonymous memory (procMem), whatever the
// load: the Go heap holds the reorder buffer, at most probes.heldLimit
// events (14.4 MiB for the 16 MiB ring; a reader that is behind fills it
// at most), and a few MiB live besides (the recorder's segment, the
// tracker, the symbolizer), and up to twice what is live (GOGC=100):
// ~40 MiB at most. Before that bound (issue 12) a loaded machine took it
// to ~85 MB, and VmRSS from ~70 MB to 136-154 MB, kept after the load.
const soakAnon = 64 << 20

// soakSteady is how much higher the steady anonymous memory (the median
// of a stretch, which a burst of load moves little) may be in the soak's
// last quarter than in its second: load through the last quarter alone
// may fill the reorder buffer and its GC headroom (2 x 14.4 MiB); a leak
// of 20 KB/s shows within an hour.
const soakSteady = 32 << 20

// TestFlightSoak records a churn at the probes' full rate under
// --max-trace 1MiB for VRAMPROF_SOAK_SECONDS (default 60), sampling the
// output directory's size and vramprof's memory every second: disk stays
// within the budget and one segment, and memory within its bounds, which
// hold whatever the load (an hour's soak meets other work on the machine):
// anonymous memory (the Go heap, where anything that grows would be) no
// higher than soakAnon, and no higher in the last quarter than in the
// second (medians, within soakSteady). Then Ctrl-C (SIGINT) ends it, and
// the outputs say what the flight recorder summarised. It logs a line a
// minute (go test -v) and a summary line, for the issue; load the machine
// (or pin vramprof to a busy CPU) to soak it behind.
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
	require.GreaterOrEqual(t, seconds, 20, "VRAMPROF_SOAK_SECONDS: warm-up and four quarters")
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

	var maxDisk, largest, minuteDisk int64
	var rss, anon []uint64 // one sample a second
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 1; i <= seconds; i++ {
		<-tick.C
		disk, big := dirBytes(dir)
		r, a := procMem(pid)
		rss, anon = append(rss, r), append(anon, a)
		maxDisk, largest, minuteDisk = max(maxDisk, disk), max(largest, big), max(minuteDisk, disk)
		if i%60 == 0 || i == seconds {
			from := (i - 1) / 60 * 60
			t.Logf("soak t=%5ds: disk max %7d B; rss min %6d max %6d median %6d KiB; anon min %6d max %6d median %6d KiB (this minute)",
				i, minuteDisk, slices.Min(rss[from:i])>>10, slices.Max(rss[from:i])>>10, median(rss[from:i])>>10,
				slices.Min(anon[from:i])>>10, slices.Max(anon[from:i])>>10, median(anon[from:i])>>10)
			minuteDisk = 0
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
	tot := mustReadJSON[struct {
		Totals struct {
			Lost uint64 `json:"lost_events"`
			Late uint64 `json:"late_events"`
		} `json:"totals"`
	}](t, filepath.Join(dir, "report.json")).Totals
	events := fr.Run.Flight.KeptEvents + fr.Run.Flight.SummarisedEvents

	// The first 5 s start the target and fill the ring buffer once.
	q, half := len(rss)/4, len(rss)/2
	second, last := median(anon[q:2*q]), median(anon[3*q:])
	peak := slices.Max(anon[5:])
	t.Logf("soak summary: %d s, %d events (%.0f events/s), kept %d, lost %d, late %d; disk max %d B (budget %d, largest segment %d); "+
		"rss max %d KiB in the first half, %d KiB in the second; anon max %d KiB, median %d KiB in the second quarter, %d KiB in the last",
		seconds, events, float64(events)/float64(seconds), fr.Run.Flight.KeptEvents, tot.Lost, tot.Late, maxDisk, budget, largest,
		slices.Max(rss[5:half])>>10, slices.Max(rss[half:])>>10, peak>>10, second>>10, last>>10)
	assert.LessOrEqual(t, maxDisk, int64(budget)+largest, "disk: the budget and one segment")
	assert.LessOrEqual(t, peak, uint64(soakAnon), "anon memory %d KiB, bound %d KiB", peak>>10, soakAnon>>10)
	assert.LessOrEqual(t, last, second+soakSteady,
		"steady anon memory grew: median %d KiB in the second quarter, %d KiB in the last", second>>10, last>>10)
}

// median returns the median of xs (not empty), leaving xs alone.
func median(xs []uint64) uint64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
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
	// Once the recorder is at its 12th segment (about 4 kept, the first 8
	// deleted: the oldest kept opens with a checkpoint of twice what is
	// kept), the moment; then until it is written.
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "trace-000012.vpt"))
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the flight recorder never reached its 12th segment; stderr: %s", &stderr)
	require.NoError(t, cmd.Process.Signal(syscall.SIGUSR1))
	require.Eventually(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "moments", "usr1-1-*", "report.json"))
		return len(m) == 1
	}, time.Minute, 20*time.Millisecond, "no moment report written")
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
