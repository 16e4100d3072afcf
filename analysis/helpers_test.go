package analysis

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

const (
	KiB = uint64(1) << 10
	MiB = uint64(1) << 20
	GiB = uint64(1) << 30
	// tick is one leak-grid bucket for a run of 64 ticks: the grid's width
	// is 1024 ns doubled until 64 buckets cover the run, 1024<<20 = 1<<30.
	tick = uint64(1) << 30
	sec  = uint64(1e9)
)

// mustAnalyze feeds the records to a new Analyzer and finishes it.
func mustAnalyze(tb testing.TB, opts Options, recs []event.Record) *Result {
	tb.Helper()
	a := New(opts)
	for _, r := range recs {
		require.NoError(tb, a.Add(r))
	}
	return a.Finish()
}

// poolResult ends a pool stream and analyzes it.
func poolResult(tb testing.TB, s *eventtest.PoolStream) *Result {
	tb.Helper()
	return mustAnalyze(tb, Options{}, s.Finish())
}

func process(tb testing.TB, r *Result, pid uint32) *Process {
	tb.Helper()
	for i := range r.Processes {
		if r.Processes[i].PID == pid {
			return &r.Processes[i]
		}
	}
	require.FailNow(tb, "no process", "pid %d", pid)
	return nil
}

func findings(r *Result, kind string) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

// noPeakStacks drops the devices' peak stacks, for tests about their byte
// figures (TestDevicePeakStacks checks the stacks).
func noPeakStacks(ds []Device) []Device {
	out := make([]Device, len(ds))
	for i, d := range ds {
		d.PeakStacks = nil
		out[i] = d
	}
	return out
}
