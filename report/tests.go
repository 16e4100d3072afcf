package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report/pytests"
	"github.com/vramprof/vramprof/report/units"
)

// Report is a recording's report: its analysis, and the pytest tests'
// own figures, read from the same trace by report/pytests (the analysis
// does not model which test runs). WriteJSON, WriteMarkdown and WriteHTML
// render a Report with its Result alone; the recorder renders the whole
// Report, so `run`, `report` and `check` write the same tests.
type Report struct {
	Result *analysis.Result
	// Pytest says the trace showed pytest running tests: a TestPhase
	// record (pytests.Tracker.SawPhases), or an allocation made in a test
	// (Tests not empty). report.json then has "tests" (empty when no test
	// allocated), report.md and report.html a Tests section.
	Pytest bool
	// Tests are the tests an allocation was made in, in the order they
	// began (pytests.Tracker.Tests), each with the limit check judged its
	// peak against.
	Tests []Test
}

// Test is one pytest test's figures (package pytests) as the reports show
// them.
type Test struct {
	pytests.Test
	// Limit is the peak `vramprof check` allowed it (--max-peak-per-test,
	// a limits file's line); nil when check judged none, or did not run.
	Limit *TestLimit
}

// TestLimit is the peak a test may reach, and where that limit comes
// from: "--max-peak-per-test", or a limits file's "FILE:LINE".
type TestLimit struct {
	Bytes uint64
	From  string
}

// Pass reports whether a test's peak is within the limit, as check judges
// it: at most Bytes.
func (l *TestLimit) Pass(peak uint64) bool { return peak <= l.Bytes }

// JSONTest is one entry of report.json's "tests": a pytest test's own
// allocations (package pytests' figures), at Layer.
type JSONTest struct {
	// NodeID is pytest's node id, "path::[Class::]name[params]" ("[...]"
	// only with Basis "phases").
	NodeID string `json:"node_id"`
	// Basis is how its allocations were told apart: "phases"
	// (PYTEST_CURRENT_TEST) or "frames" (its frame in their stacks).
	Basis string `json:"basis"`
	// Layer is "segment" (the CUDA API, as totals) or "block" (a traced
	// caching allocator's tensors).
	Layer string `json:"layer"`
	// PeakBytes is the most of its allocations live at once, first at
	// PeakTimeNs; PeakSite the test's line that asked for it ("" when a
	// fixture's allocation reached it).
	PeakBytes  uint64 `json:"peak_bytes"`
	PeakTimeNs uint64 `json:"peak_time_ns"`
	PeakSite   string `json:"peak_site"`
	// LeakedBytes and LeakedAllocations are its allocations still live
	// when its teardown ended (Basis "phases"), when the next test began
	// (Basis "frames"), or at the end for the last one.
	LeakedBytes       uint64 `json:"leaked_bytes"`
	LeakedAllocations uint64 `json:"leaked_allocations"`
	// Allocations and AllocatedBytes count its successful allocations.
	Allocations    uint64 `json:"allocations"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	// StartNs and EndNs bound it: its first phase and the end of its
	// teardown (Basis "phases"), else its first and last calls.
	StartNs uint64 `json:"start_ns"`
	EndNs   uint64 `json:"end_ns"`
	// File is its source file as its frame names it and Function its
	// co_qualname; absent when no frame of it was seen.
	File     string `json:"file,omitempty"`
	Function string `json:"function,omitempty"`
	// Limit is the peak `vramprof check` allowed it and the verdict;
	// absent when check judged none.
	Limit *JSONTestLimit `json:"limit,omitempty"`
}

// JSONTestLimit is a test's limit and verdict: Pass when its peak is at
// most Bytes. From is "--max-peak-per-test" or a limits file's
// "FILE:LINE".
type JSONTestLimit struct {
	Bytes uint64 `json:"bytes"`
	From  string `json:"from"`
	Pass  bool   `json:"pass"`
}

// JSON builds report.json's content: NewJSON's, with "tests" when
// r.Pytest.
func (r *Report) JSON() *JSON {
	j := NewJSON(r.Result)
	if !r.Pytest && len(r.Tests) == 0 {
		return j
	}
	j.Tests = make([]JSONTest, 0, len(r.Tests))
	for i := range r.Tests {
		t := &r.Tests[i]
		jt := JSONTest{NodeID: t.ID, Basis: t.Basis, Layer: t.Layer, PeakBytes: t.PeakBytes,
			PeakTimeNs: r.Result.Rel(t.PeakNs), PeakSite: t.PeakSite, LeakedBytes: t.LeakedBytes,
			LeakedAllocations: t.LeakedAllocations, Allocations: t.Allocations, AllocatedBytes: t.AllocatedBytes,
			StartNs: r.Result.Rel(t.StartNs), EndNs: r.Result.Rel(t.EndNs), File: t.File, Function: t.Function}
		if t.PeakBytes == 0 {
			jt.PeakTimeNs = 0
		}
		if l := t.Limit; l != nil {
			jt.Limit = &JSONTestLimit{Bytes: l.Bytes, From: l.From, Pass: l.Pass(t.PeakBytes)}
		}
		j.Tests = append(j.Tests, jt)
	}
	return j
}

// WriteJSON writes report.json for r, as WriteJSON does for its Result.
func (r *Report) WriteJSON(w io.Writer) error {
	if r.Result == nil {
		return ErrNilResult
	}
	return encodeJSON(w, r.JSON())
}

// WriteMarkdown writes report.md for r, as WriteMarkdown does for its
// Result, with the Tests table when r.Pytest.
func (r *Report) WriteMarkdown(w io.Writer) error { return writeMarkdown(w, r) }

// WriteHTML writes report.html for r, as WriteHTML does for its Result,
// with the Tests section when r.Pytest.
func (r *Report) WriteHTML(w io.Writer) error { return writeHTML(w, r) }

// testsHeading is the line under a Tests heading: what the figures count.
func testsHeading(tests []Test) string {
	if len(tests) == 0 {
		return "pytest ran tests, and no allocation was made in one."
	}
	layer, bases := tests[0].Layer, map[string]bool{}
	for i := range tests {
		bases[tests[i].Basis] = true
	}
	what := "device memory at the segment layer (the CUDA API)"
	if layer == "block" {
		what = "tensors at the block layer (the caching allocator's)"
	}
	var how []string
	if bases[pytests.BasisPhases] {
		how = append(how, "made while pytest ran it (PYTEST_CURRENT_TEST), setup and teardown included; leaked: live after its teardown")
	}
	if bases[pytests.BasisFrames] {
		how = append(how, "under its frame in the stack (no PYTEST_CURRENT_TEST recorded); leaked: live when the next test began")
	}
	return fmt.Sprintf("Each test's own allocations, %s: %s. Peak: the most of them live at once.", what, strings.Join(how, "; or "))
}

// limitText is a test's limit and verdict for people: "PASS, limit 64.00
// MiB (--max-peak-per-test)"; "none" without one.
func limitText(t *Test) string {
	l := t.Limit
	if l == nil {
		return "none"
	}
	verdict := "PASS"
	if !l.Pass(t.PeakBytes) {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s, limit %s (%s)", verdict, units.Bytes(l.Bytes), l.From)
}

// writeTestsMarkdown writes report.md's Tests section: human units; the
// exact bytes are in report.json.
func writeTestsMarkdown(p func(string, ...any), r *Report) {
	if !r.Pytest && len(r.Tests) == 0 {
		return
	}
	p("## Tests\n\n%s Exact bytes are in report.json (\"tests\").\n\n", md(testsHeading(r.Tests)))
	if len(r.Tests) == 0 {
		return
	}
	limits := false
	for i := range r.Tests {
		limits = limits || r.Tests[i].Limit != nil
	}
	p("| test | peak | leaked | allocated | basis |")
	if limits {
		p(" limit |")
	}
	p("\n| --- | ---: | ---: | ---: | --- |")
	if limits {
		p(" --- |")
	}
	p("\n")
	for i := range r.Tests {
		t := &r.Tests[i]
		p("| %s | %s | %s in %d | %s in %d | %s |", cell(t.ID), units.Bytes(t.PeakBytes), units.Bytes(t.LeakedBytes),
			t.LeakedAllocations, units.Bytes(t.AllocatedBytes), t.Allocations, t.Basis)
		if limits {
			p(" %s |", cell(limitText(t)))
		}
		p("\n")
	}
	p("\n")
}

// htmlTests is report.html's Tests section.
type htmlTests struct {
	Heading string
	Limits  bool
	Rows    []htmlTest
}

// htmlTest is one row of report.html's Tests table.
type htmlTest struct {
	ID, Basis, Site, Limit string
	Fail                   bool
	Peak, Leaked, Alloc    uint64
	LeakedN, AllocN        uint64
}

func newHTMLTests(r *Report) *htmlTests {
	if !r.Pytest && len(r.Tests) == 0 {
		return nil
	}
	ht := &htmlTests{Heading: testsHeading(r.Tests)}
	for i := range r.Tests {
		t := &r.Tests[i]
		row := htmlTest{ID: t.ID, Basis: t.Basis, Site: t.PeakSite, Limit: limitText(t), Peak: t.PeakBytes,
			Leaked: t.LeakedBytes, LeakedN: t.LeakedAllocations, Alloc: t.AllocatedBytes, AllocN: t.Allocations}
		if t.Limit != nil {
			ht.Limits = true
			row.Fail = !t.Limit.Pass(t.PeakBytes)
		}
		ht.Rows = append(ht.Rows, row)
	}
	return ht
}
