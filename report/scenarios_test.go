package report

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// The scenarios of analysis's finding tests come from eventtest, so that
// the words of their findings are tested here, where they are written
// (findings.go), on the same streams.

const (
	KiB = uint64(1) << 10
	// gridTick is one leak-grid bucket for a run of 64 ticks: the grid's width
	// is 1024 ns doubled until 64 buckets cover the run, 1024<<20 = 1<<30.
	gridTick = uint64(1) << 30
)

// mustAnalyze feeds the records to a new Analyzer and finishes it.
func mustAnalyze(tb testing.TB, opts analysis.Options, recs []event.Record) *analysis.Result {
	tb.Helper()
	a := analysis.New(opts)
	for _, r := range recs {
		require.NoError(tb, a.Add(r))
	}
	return a.Finish()
}

// poolResult ends a pool stream and analyzes it.
func poolResult(tb testing.TB, s *eventtest.PoolStream) *analysis.Result {
	tb.Helper()
	return mustAnalyze(tb, analysis.Options{}, s.Finish())
}

// worded words res's findings and keeps those of kind.
func worded(res *analysis.Result, kind string) []wordedFinding {
	var out []wordedFinding
	for _, f := range wordFindings(res) {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}
