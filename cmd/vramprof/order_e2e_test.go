//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// churnTruth is what testdata/scenarios/churn_threads counts about itself
// (atomic counters: the program cannot order its threads' calls, and needs
// not to for these figures).
type churnTruth struct {
	PID    uint32           `json:"pid"`
	Totals probetest.Totals `json:"totals"`
	Books  struct {
		Runtime churnBook `json:"runtime"`
		Driver  churnBook `json:"driver"`
	} `json:"books"`
}

type churnBook struct {
	Allocations    uint64 `json:"allocations"`
	Frees          uint64 `json:"frees"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
}

// churnReport is the part of report.json the churn test reads.
type churnReport struct {
	Totals struct {
		Allocations         *uint64 `json:"allocations"`
		Frees               *uint64 `json:"frees"`
		UnknownFrees        *uint64 `json:"unknown_frees"`
		ReplacedAllocations *uint64 `json:"replaced_allocations"`
		LostEvents          *uint64 `json:"lost_events"`
		LateEvents          *uint64 `json:"late_events"`
		AllocatedBytes      *uint64 `json:"allocated_bytes"`
		LiveBytesAtEnd      *uint64 `json:"live_bytes_at_end"`
	} `json:"totals"`
	Books struct {
		Runtime reportBook `json:"runtime"`
		Driver  reportBook `json:"driver"`
	} `json:"books"`
}

type reportBook struct {
	Allocations    uint64 `json:"allocations"`
	Frees          uint64 `json:"frees"`
	UnknownFrees   uint64 `json:"unknown_frees"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
}

// churnRuns and churnPairs size TestRunExactUnderChurn. 16 threads x 10000
// pairs (plus 8000 kept buffers) take ~4 s a run on a loaded 2-core VM, and
// in return order every run misplaced hundreds of frees (see the issue 10
// note); the scenario's default, 100000, is for reproducing by hand.
const (
	churnRuns  = 20
	churnPairs = 10000
)

// TestRunExactUnderChurn runs churn_threads under `vramprof run` churnRuns
// times: 16 threads churn one size through cudaMalloc/cudaFree (an address
// freed by one thread is handed at once to another) while 8 threads keep
// 8000 buffers. Every run must count exactly what the program counted:
// allocations, frees, bytes, live at the end, both API books, and no
// unknown free, replaced allocation, lost or late event. A free ordered by
// its return instead of its entry shows here as an unknown free.
func TestRunExactUnderChurn(t *testing.T) {
	probetest.RequirePrivilege(t)
	bin := probetest.Bin(t, "churn_threads")
	pairs := churnPairs
	if s := os.Getenv("VRAMPROF_CHURN_PAIRS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "VRAMPROF_CHURN_PAIRS")
		pairs = n
	}
	runs := churnRuns
	if s := os.Getenv("VRAMPROF_CHURN_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "VRAMPROF_CHURN_RUNS")
		runs = n
	}
	for i := range runs {
		t.Run(fmt.Sprintf("run%02d", i), func(t *testing.T) {
			tmp := t.TempDir()
			truthPath := filepath.Join(tmp, "truth.json")
			dir := filepath.Join(tmp, "out")
			start := time.Now()
			r := vramprof(t, execOpts{env: []string{"VRAMPROF_TRUTH=" + truthPath, "CHURN_PAIRS=" + strconv.Itoa(pairs)}, dir: tmp},
				"run", "-o", dir, "--", bin)
			require.Equal(t, 0, r.code, "exit code; stderr:\n%s", r.stderr)
			truth := mustReadJSON[churnTruth](t, truthPath)
			rep := mustReadJSON[churnReport](t, filepath.Join(dir, "report.json"))
			want, tt := truth.Totals, rep.Totals
			t.Logf("%d pairs x 16 threads in %s: program %d allocations, %d frees, %d live; vramprof %d, %d (%d unknown, %d replaced, %d late), %d live",
				pairs, time.Since(start).Round(time.Millisecond), want.Allocations, want.Frees, want.LiveBytesAtEnd,
				val(t, "allocations", tt.Allocations), val(t, "frees", tt.Frees), val(t, "unknown_frees", tt.UnknownFrees),
				val(t, "replaced_allocations", tt.ReplacedAllocations), val(t, "late_events", tt.LateEvents),
				val(t, "live_bytes_at_end", tt.LiveBytesAtEnd))

			// The truth is the program's, and what the scenario is built to be.
			require.Equal(t, uint64(16*pairs+8000), want.Allocations, "truth: allocations")
			require.Equal(t, uint64(16*pairs), want.Frees, "truth: frees")
			require.Equal(t, uint64(8000<<20), want.LiveBytesAtEnd, "truth: kept bytes")

			assert.Equal(t, want.Allocations, val(t, "allocations", tt.Allocations), "allocations")
			assert.Equal(t, want.Frees, val(t, "frees", tt.Frees), "frees")
			assert.Equal(t, want.AllocatedBytes, val(t, "allocated_bytes", tt.AllocatedBytes), "allocated_bytes")
			assert.Equal(t, want.LiveBytesAtEnd, val(t, "live_bytes_at_end", tt.LiveBytesAtEnd), "live_bytes_at_end")
			assert.Zero(t, val(t, "unknown_frees", tt.UnknownFrees), "unknown_frees")
			assert.Zero(t, val(t, "replaced_allocations", tt.ReplacedAllocations), "replaced_allocations")
			assert.Zero(t, val(t, "lost_events", tt.LostEvents), "lost_events")
			assert.Zero(t, val(t, "late_events", tt.LateEvents), "late_events")

			// Each book sees every call once: a runtime call and its one
			// nested driver call. Live at the end is the program's in both.
			for _, b := range []struct {
				name string
				want churnBook
				got  reportBook
			}{
				{"runtime", truth.Books.Runtime, rep.Books.Runtime},
				{"driver", truth.Books.Driver, rep.Books.Driver},
			} {
				assert.Equal(t, b.want.Allocations, b.got.Allocations, "%s book allocations", b.name)
				assert.Equal(t, b.want.Frees, b.got.Frees, "%s book frees", b.name)
				assert.Equal(t, b.want.AllocatedBytes, b.got.AllocatedBytes, "%s book allocated_bytes", b.name)
				assert.Equal(t, want.LiveBytesAtEnd, b.got.LiveBytesAtEnd, "%s book live_bytes_at_end", b.name)
				assert.Zero(t, b.got.UnknownFrees, "%s book unknown_frees", b.name)
			}
			// The trace holds the events in effect order: its replay gives
			// the same outputs, byte for byte.
			if i == 0 {
				checkReplay(t, dir)
			}
		})
	}
}

// TestRunExactUnderLoad runs churn_threads under `vramprof run` beside six
// busy loops, a host busier than its 2 cores (other sessions, other
// jobs). The reader of the ring buffer then shared the CPU with 22 other
// threads at the same priority and fell behind the 16 traced ones: 3 runs
// of 4 lost 77210 to 194753 records of 336000 (counted, but figures no
// gate can use). The reader runs at probes.ReaderNice: every run exact.
func TestRunExactUnderLoad(t *testing.T) {
	probetest.RequirePrivilege(t)
	bin := probetest.Bin(t, "churn_threads")
	var hogs []*exec.Cmd
	t.Cleanup(func() {
		for _, h := range hogs {
			_ = h.Process.Kill()
			_ = h.Wait()
		}
	})
	for range 6 {
		h := exec.Command("sh", "-c", "while :; do :; done")
		require.NoError(t, h.Start())
		hogs = append(hogs, h)
	}
	for i := range 3 {
		tmp := t.TempDir()
		truthPath, dir := filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "out")
		r := vramprof(t, execOpts{env: []string{"VRAMPROF_TRUTH=" + truthPath, "CHURN_PAIRS=" + strconv.Itoa(churnPairs)}, dir: tmp},
			"run", "-o", dir, "--", bin)
		require.Equal(t, 0, r.code, "run %d; stderr:\n%s", i, r.stderr)
		want := mustReadJSON[churnTruth](t, truthPath).Totals
		got := mustReadJSON[churnReport](t, filepath.Join(dir, "report.json")).Totals
		require.Equal(t, uint64(16*churnPairs+8000), want.Allocations, "truth: allocations")
		assert.Zero(t, val(t, "lost_events", got.LostEvents), "run %d: lost_events", i)
		assert.Equal(t, want.Allocations, val(t, "allocations", got.Allocations), "run %d: allocations", i)
		assert.Equal(t, want.Frees, val(t, "frees", got.Frees), "run %d: frees", i)
		assert.Equal(t, want.LiveBytesAtEnd, val(t, "live_bytes_at_end", got.LiveBytesAtEnd), "run %d: live_bytes_at_end", i)
	}
}
