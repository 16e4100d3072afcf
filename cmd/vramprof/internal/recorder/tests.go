package recorder

import (
	"os"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report"
	"github.com/vramprof/vramprof/report/pytests"
)

// TestLimitFunc returns the peak the pytest test id may reach and where
// that limit comes from ("--max-peak-per-test", "FILE:LINE"); ok false
// when none applies (compare.Limits.TestLimit). The outputs show it
// beside the test's peak, with the verdict.
type TestLimitFunc func(id string) (bytes uint64, from string, ok bool)

// TestRoot is the directory the per-test figures name test files
// relative to when they come from frames (pytests.NewTracker): the
// working directory, where check runs and pytest's rootdir when pytest
// runs from the project's top. Every output and check's verdict use it.
func TestRoot() string {
	wd, _ := os.Getwd()
	return wd
}

// testsTracker follows the pytest tests of a replay beside its analysis:
// the same records, in the same single read.
type testsTracker struct {
	tr *pytests.Tracker
}

func newTestsTracker() *testsTracker {
	return &testsTracker{tr: pytests.NewTracker(TestRoot())}
}

// feed returns a consumer of records that gives each to the tracker, then
// to also when it is not nil.
func (t *testsTracker) feed(also func(event.Record) error) func(event.Record) error {
	return func(rec event.Record) error {
		t.tr.Add(rec)
		if also != nil {
			return also(rec)
		}
		return nil
	}
}

// report is res's Report with the tests followed, each with its limit
// when limit (nil: none) gives one. The tracker is read once.
func (t *testsTracker) report(res *analysis.Result, limit TestLimitFunc) *report.Report {
	tests := t.tr.Tests()
	r := &report.Report{Result: res, Pytest: t.tr.SawPhases() || len(tests) > 0}
	for _, tt := range tests {
		rt := report.Test{Test: tt}
		if limit != nil {
			if b, from, ok := limit(tt.ID); ok {
				rt.Limit = &report.TestLimit{Bytes: b, From: from}
			}
		}
		r.Tests = append(r.Tests, rt)
	}
	return r
}
