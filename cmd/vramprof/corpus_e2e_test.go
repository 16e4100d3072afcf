//go:build linux

package main

// The labelled corpus (issue 18, item 6): every program of testdata/corpus
// says what is wrong with it, independently of vramprof (its truth's
// "label"), and this test holds vramprof's findings against those labels.
// The bar (DESIGN.md, "Findings: the contract with the user"): no finding
// above info on a healthy program; every labelled defect found, of its
// kind, at its site, with bytes within 1%.

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// corpusTableEnv, when set, names a file TestFindingsCorpus and
// TestFindingsCorpusTorch append their tables to, without asserting the
// bar: `make bench` prints the figures (go test keeps a passing test's
// output to itself), and the tests proper (make test) are what gates.
const corpusTableEnv = "VRAMPROF_CORPUS_TABLE"

// corpusBytesTolerance: a finding's bytes count as the defect's within this
// share of the labelled bytes.
const corpusBytesTolerance = 0.01

// corpusPrograms lists testdata/corpus/*.c by name ("b_step_leak"); each is
// built as testdata/build/bin/corpus_<name>.
func corpusPrograms(tb testing.TB) []string {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(probetest.Root(), "testdata", "corpus", "*.c"))
	require.NoError(tb, err)
	var out []string
	for _, p := range paths {
		out = append(out, strings.TrimSuffix(filepath.Base(p), ".c"))
	}
	sort.Strings(out)
	return out
}

// corpusReport is the part of report.json the corpus reads: the findings,
// with an oom or fragmentation finding's failing request (its "oom"
// evidence, present when the block layer was traced).
type corpusReport struct {
	Blocks *struct {
		Allocations uint64 `json:"allocations"`
	} `json:"blocks"`
	Findings   []corpusReportFinding `json:"findings"`
	Iterations []corpusIterations    `json:"iterations"`
}

// corpusIterations is a process's loop as report.json found it.
type corpusIterations struct {
	PID      uint32 `json:"pid"`
	Count    uint64 `json:"count"`
	PeriodNs uint64 `json:"period_ns"`
	Site     string `json:"site"`
}

// corpusReportFinding is one finding of corpusReport.
type corpusReportFinding struct {
	Kind     string        `json:"kind"`
	Severity string        `json:"severity"`
	Bytes    uint64        `json:"bytes"`
	Stacks   []ReportStack `json:"stacks"`
	OOM      *corpusOOM    `json:"oom"`
}

// corpusOOM is the failing request an oom or fragmentation finding is
// about.
type corpusOOM struct {
	Site   string   `json:"site"`
	Frames []string `json:"frames"`
}

// corpusFinding is a finding as the corpus reads it.
type corpusFinding struct {
	Kind, Severity, Site string
	Bytes                uint64
}

func (f corpusFinding) String() string {
	site := f.Site
	if site == "" {
		site = "(no site)"
	}
	return fmt.Sprintf("%s/%s at %s, %d bytes", f.Kind, f.Severity, site, f.Bytes)
}

// aboveInfo: a finding a person is asked to act on.
func (f corpusFinding) aboveInfo() bool { return f.Severity != "info" }

// corpusOutcome is one program's run, judged.
type corpusOutcome struct {
	name     string
	healthy  bool
	defects  []probetest.Defect
	findings []corpusFinding
	// found[i] is the finding that matched defects[i] (kind, site and
	// bytes), or -1.
	found []int
	// near[i] is a finding of defects[i]'s kind at its site whose bytes are
	// off by more than the tolerance (when found[i] is -1), or -1.
	near []int
	// fp are the findings above info that match no labelled defect's kind
	// and site.
	fp []int
	// loops are the processes' loops: as labelled, and as report.json's
	// iterations found them.
	loops []corpusLoop
	// err is why the program could not be judged (it did not run, or wrote
	// no label); nil otherwise.
	err error
}

// corpusLoop is one process's loop: the steps it counted, and the loop
// vramprof found (found false: none).
type corpusLoop struct {
	pid             uint32
	label           probetest.Steps
	found           bool
	count, periodNs uint64
	site            string
}

// corpusPeriodTolerance: a found loop's period is the labelled one within
// this share.
const corpusPeriodTolerance = 0.1

// right: the loop was found with the labelled count, and its period within
// corpusPeriodTolerance.
func (l corpusLoop) right() bool {
	return l.found && l.count == l.label.Count &&
		math.Abs(float64(l.periodNs)-float64(l.label.PeriodNs)) <= corpusPeriodTolerance*float64(l.label.PeriodNs)
}

// inAllocator tells a frame of the caching allocator (libc10_cuda.so) from
// the program's own.
func inAllocator(frame string) bool {
	fn := frameFunction(frame)
	return strings.HasPrefix(fn, "c10") || strings.Contains(frame, "c10_cuda")
}

// cFunction is a frame's function without a C++ scope ("(anonymous
// namespace)::leak_step" is leak_step): labels name functions as the
// program's source spells them.
func cFunction(fn string) string {
	if i := strings.LastIndex(fn, "::"); i >= 0 {
		return fn[i+2:]
	}
	return fn
}

// siteFunctions are the functions a finding's top stack names: its site
// (analysis doc, "Sites": "fn (file:line)", or "caller (file:line) ->
// helper (file:line)" for a shared helper), or, when it has none, its first
// frame outside the CUDA runtime and the caching allocator.
func siteFunctions(s ReportStack) []string {
	if s.Site != "" {
		var out []string
		for _, part := range strings.Split(s.Site, " -> ") {
			out = append(out, cFunction(frameFunction(part)))
		}
		return out
	}
	for _, f := range s.Frames {
		if !inRuntime(f) && !inAllocator(f) && !strings.HasPrefix(f, "0x") {
			return []string{cFunction(frameFunction(f))}
		}
	}
	return nil
}

// findingSiteStack is the stack that names a finding's site: the failing
// request of an oom or fragmentation finding when the block layer gave it
// (its other stacks are what was live then), else the finding's top stack.
func findingSiteStack(f *corpusReportFinding) (ReportStack, bool) {
	if f.OOM != nil && (f.OOM.Site != "" || len(f.OOM.Frames) > 0) {
		return ReportStack{Site: f.OOM.Site, Frames: f.OOM.Frames}, true
	}
	if len(f.Stacks) == 0 {
		return ReportStack{}, false
	}
	return f.Stacks[0], true
}

// corpusSite is the site a finding is matched by: the site's first function
// (the caller that tells a stack apart, or the allocating function itself).
func corpusSite(f *corpusReportFinding) string {
	if s, ok := findingSiteStack(f); ok {
		if fns := siteFunctions(s); len(fns) > 0 {
			return fns[0]
		}
	}
	return ""
}

// sameSite: the finding names the defect's function, as its site or as the
// helper of its site's call edge.
func sameSite(f *corpusReportFinding, site string) bool {
	s, ok := findingSiteStack(f)
	return ok && slices.Contains(siteFunctions(s), site)
}

// bytesWithin: got is want within corpusBytesTolerance.
func bytesWithin(got, want uint64) bool {
	return math.Abs(float64(got)-float64(want)) <= corpusBytesTolerance*float64(want)
}

// readCorpusLabels reads a run's truth files: the program's own, and its
// children's in a process tree. Healthy means no process labelled a defect
// and at least one labelled itself healthy.
func readCorpusLabels(tb testing.TB, truthPath string) (healthy bool, defects []probetest.Defect, loops []corpusLoop, err error) {
	tb.Helper()
	root, err := probetest.ReadTruth(truthPath)
	if err != nil {
		return false, nil, nil, err
	}
	truths := []*probetest.Truth{root}
	kids := mustReadJSON[rankTruth](tb, truthPath).Children
	for _, pid := range kids {
		kid, err := probetest.ReadTruth(fmt.Sprintf("%s.%d", truthPath, pid))
		if err != nil {
			return false, nil, nil, err
		}
		truths = append(truths, kid)
	}
	labelled := false
	for _, tr := range truths {
		if tr.Label == nil {
			continue
		}
		labelled = true
		defects = append(defects, tr.Label.Defects...)
		if tr.Label.Steps != nil {
			loops = append(loops, corpusLoop{pid: tr.PID, label: *tr.Label.Steps})
		}
	}
	if !labelled {
		return false, nil, nil, fmt.Errorf("%s: no process of %s labelled itself (truth_label_healthy or truth_label_defect)", truthPath, root.Scenario)
	}
	return len(defects) == 0, defects, loops, nil
}

// judge matches a program's findings against its labels.
func judge(o *corpusOutcome, rep *corpusReport) {
	for i := range o.loops {
		l := &o.loops[i]
		for _, it := range rep.Iterations {
			if it.PID == l.pid {
				l.found, l.count, l.periodNs, l.site = true, it.Count, it.PeriodNs, it.Site
			}
		}
	}
	for i := range rep.Findings {
		f := &rep.Findings[i]
		o.findings = append(o.findings, corpusFinding{Kind: f.Kind, Severity: f.Severity, Site: corpusSite(f), Bytes: f.Bytes})
	}
	used := make([]bool, len(o.findings))
	o.found = make([]int, len(o.defects))
	o.near = make([]int, len(o.defects))
	for i, d := range o.defects {
		o.found[i], o.near[i] = -1, -1
		for j, f := range o.findings {
			if used[j] || f.Kind != d.Kind || !sameSite(&rep.Findings[j], d.Site) {
				continue
			}
			if bytesWithin(f.Bytes, d.Bytes) {
				o.found[i], used[j] = j, true
				break
			}
			if o.near[i] < 0 {
				o.near[i] = j
			}
		}
	}
	for j, f := range o.findings {
		if !f.aboveInfo() || used[j] {
			continue
		}
		labelled := false
		for _, d := range o.defects {
			labelled = labelled || f.Kind == d.Kind && sameSite(&rep.Findings[j], d.Site)
		}
		if !labelled {
			o.fp = append(o.fp, j)
		}
	}
}

// corpusProgram is one labelled program: its name (h_* healthy, b_*
// broken, anything else either) and the command that runs it.
type corpusProgram struct {
	name string
	argv []string
	// tensors, when set, reads from the program's truth how many tensors it
	// made: the block layer must have seen each, or the run is not judged
	// (a harness failure, not a rule's).
	tensors func(tb testing.TB, truthPath string) uint64
	// open, when set, says why the program does not meet the bar yet (a
	// gap of the rules or the unwinder that issue 18 still tracks). The
	// program is judged and counted in the table as any other; its test
	// fails when it meets the bar (take it off the list) or when it cannot
	// be judged, and otherwise logs the gap instead of failing.
	open string
}

// runCorpusProgram profiles one corpus program with `vramprof run` (the
// block layer on: --pool auto, the default) and judges its findings.
func runCorpusProgram(t *testing.T, p corpusProgram) *corpusOutcome {
	t.Helper()
	o := &corpusOutcome{name: p.name}
	tmp := t.TempDir()
	truthPath := filepath.Join(tmp, "truth.json")
	dir := filepath.Join(tmp, "out")
	r := vramprof(t, execOpts{env: []string{"VRAMPROF_TRUTH=" + truthPath}, dir: tmp},
		append([]string{"run", "-o", dir, "--"}, p.argv...)...)
	var err error
	o.healthy, o.defects, o.loops, err = readCorpusLabels(t, truthPath)
	if err != nil {
		o.err = err
		return o
	}
	// An OOM ends the program with 1, as an uncaught OutOfMemoryError does;
	// 3 is a program whose own arithmetic disagreed with its allocator.
	want := 0
	for _, d := range o.defects {
		if d.Kind == "oom" {
			want = 1
		}
	}
	if r.code != want {
		o.err = fmt.Errorf("exit code %d, want %d; stderr:\n%s", r.code, want, r.stderr)
		return o
	}
	rep := mustReadJSON[corpusReport](t, filepath.Join(dir, "report.json"))
	if p.tensors != nil {
		want, got := p.tensors(t, truthPath), uint64(0)
		if rep.Blocks != nil {
			got = rep.Blocks.Allocations
		}
		if got != want {
			o.err = fmt.Errorf("the block layer saw %d of the %d tensors the program made (another tracer on the process?)", got, want)
			return o
		}
	}
	judge(o, rep)
	return o
}

// corpusRow is one finding kind's line of the table.
type corpusRow struct{ tp, fp, miss int }

// corpusRows counts, per finding kind, the judged programs' true
// positives (labelled defects found), false positives (findings above info
// that no label explains) and misses (labelled defects not found).
func corpusRows(outs []*corpusOutcome) map[string]*corpusRow {
	rows := map[string]*corpusRow{}
	row := func(kind string) *corpusRow {
		if rows[kind] == nil {
			rows[kind] = &corpusRow{}
		}
		return rows[kind]
	}
	for _, o := range outs {
		if o == nil || o.err != nil {
			continue
		}
		for i, d := range o.defects {
			if o.found[i] >= 0 {
				row(d.Kind).tp++
			} else {
				row(d.Kind).miss++
			}
		}
		for _, j := range o.fp {
			row(o.findings[j].Kind).fp++
		}
	}
	return rows
}

// corpusTable writes the table: per finding kind, true positives, false
// positives and misses; then each program, its label and what was found.
func corpusTable(w io.Writer, title string, outs []*corpusOutcome) (healthyClean, healthyN, brokenFound, brokenN int) {
	rows := corpusRows(outs)
	for _, o := range outs {
		if o.err != nil {
			continue
		}
		if o.healthy {
			healthyN++
			if len(o.fp) == 0 {
				healthyClean++
			}
			continue
		}
		brokenN++
		all := true
		for _, j := range o.found {
			all = all && j >= 0
		}
		if all {
			brokenFound++
		}
	}
	kinds := make([]string, 0, len(rows))
	for k := range rows {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Fprintf(w, "%s: %d programs: healthy %d/%d with no finding above info; broken %d/%d found at their sites with bytes within 1%%\n",
		title, len(outs), healthyClean, healthyN, brokenFound, brokenN)
	fmt.Fprintf(w, "%-20s | %3s | %3s | %4s\n", "kind", "TP", "FP", "miss")
	var tot corpusRow
	for _, k := range kinds {
		r := rows[k]
		tot.tp, tot.fp, tot.miss = tot.tp+r.tp, tot.fp+r.fp, tot.miss+r.miss
		fmt.Fprintf(w, "%-20s | %3d | %3d | %4d\n", k, r.tp, r.fp, r.miss)
	}
	fmt.Fprintf(w, "%-20s | %3d | %3d | %4d\n", "all", tot.tp, tot.fp, tot.miss)
	var loops, loopsRight int
	for _, o := range outs {
		for _, l := range o.loops {
			loops++
			if l.right() {
				loopsRight++
			}
		}
	}
	fmt.Fprintf(w, "loops: %d/%d processes with their step count found exactly and the period within %.0f%%\n",
		loopsRight, loops, 100*corpusPeriodTolerance)
	for _, o := range outs {
		switch {
		case o.err != nil:
			fmt.Fprintf(w, "%s: not judged: %v\n", o.name, o.err)
			continue
		case o.healthy:
			fmt.Fprintf(w, "%s: label healthy\n", o.name)
		default:
			for i, d := range o.defects {
				verdict := "MISS"
				if o.found[i] >= 0 {
					verdict = "found"
				} else if j := o.near[i]; j >= 0 {
					got := o.findings[j].Bytes
					verdict = fmt.Sprintf("MISS (%s at its site with %d bytes: %+.2f%%)", d.Kind, got,
						100*(float64(got)-float64(d.Bytes))/float64(d.Bytes))
				}
				fmt.Fprintf(w, "%s: label %s at %s, %d bytes: %s\n", o.name, d.Kind, d.Site, d.Bytes, verdict)
			}
		}
		for _, l := range o.loops {
			got := "no loop found"
			if l.found {
				got = fmt.Sprintf("found %d every %.2f ms at %s", l.count, float64(l.periodNs)/1e6, l.site)
			}
			mark := ""
			if !l.right() {
				mark = " [wrong]"
			}
			fmt.Fprintf(w, "    loop: %d x %s every %.2f ms; %s%s\n", l.label.Count, l.label.Func,
				float64(l.label.PeriodNs)/1e6, got, mark)
		}
		for j, f := range o.findings {
			if !f.aboveInfo() {
				continue
			}
			mark := ""
			if slices.Contains(o.fp, j) {
				mark = " [FP]"
			}
			fmt.Fprintf(w, "    finding %s%s\n", f, mark)
		}
	}
	return healthyClean, healthyN, brokenFound, brokenN
}

// TestFindingsCorpus runs every program of testdata/corpus (the fake
// caching allocator) under `vramprof run` and holds its findings to the bar
// (runCorpus).
func TestFindingsCorpus(t *testing.T) {
	probetest.RequirePrivilege(t)
	runCorpus(t, fakeCorpus)
}

// fakeCorpusPrograms are testdata/corpus's programs (the fake caching
// allocator), each run as built.
func fakeCorpusPrograms(t *testing.T) []corpusProgram {
	names := corpusPrograms(t)
	var healthy, broken int
	var progs []corpusProgram
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, "h_"):
			healthy++
		case strings.HasPrefix(n, "b_"):
			broken++
		}
		progs = append(progs, corpusProgram{name: n, argv: []string{probetest.Bin(t, "corpus_"+n)}})
	}
	require.GreaterOrEqual(t, healthy, 12, "the corpus: at least 12 healthy programs (h_*.c)")
	require.GreaterOrEqual(t, broken, 10, "the corpus: at least 10 broken programs (b_*.c)")
	return progs
}

// corpusRecording is one corpus, recorded once per test binary however
// many tests read it (TestFindingsCorpus and the per-rule corpus tests,
// corpus_rules_e2e_test.go): the rules read time, so every reader judges
// the same recordings, and the corpus takes minutes to record.
type corpusRecording struct {
	title string
	// programs lists the corpus's programs (it may build them).
	programs func(t *testing.T) []corpusProgram
	once     sync.Once
	progs    []corpusProgram
	// outs are the programs' outcomes, in order; nil for one whose
	// recording stopped (its record/<name> subtest says why).
	outs []*corpusOutcome
}

var (
	fakeCorpus  = &corpusRecording{title: "corpus", programs: fakeCorpusPrograms}
	torchCorpus = &corpusRecording{title: "corpus on libc10_cuda.so", programs: torchCorpusPrograms}
)

// outcomes returns the corpus's programs and their outcomes, recording
// them on the first call: each program in a subtest record/<name> of the
// calling test, one at a time (the rules read time: windows, steadiness,
// periods, and two recordings at once slow each other). A later caller
// skips, or fails under CI=true, when the first could not list the
// programs.
func (c *corpusRecording) outcomes(t *testing.T) ([]corpusProgram, []*corpusOutcome) {
	t.Helper()
	c.once.Do(func() {
		progs := c.programs(t)
		outs := make([]*corpusOutcome, len(progs))
		t.Run("record", func(t *testing.T) {
			for i, p := range progs {
				t.Run(p.name, func(t *testing.T) { outs[i] = runCorpusProgram(t, p) })
			}
		})
		c.progs, c.outs = progs, outs
	})
	if c.progs == nil {
		// The first reader skipped (no torchdrv) or failed listing them.
		skipOrFail(t, "%s: not recorded (see the first test that read it)", c.title)
	}
	return c.progs, c.outs
}

// meetsBar says whether a judged program meets the bar: no finding above
// info that no label explains, every labelled defect found, and every
// labelled loop found with its step count and period.
func (o *corpusOutcome) meetsBar() bool {
	for _, l := range o.loops {
		if !l.right() {
			return false
		}
	}
	return len(o.fp) == 0 && !slices.Contains(o.found, -1)
}

// runCorpus runs each program under `vramprof run`, prints the table (kind
// | TP | FP | miss, and each program's label against its findings) and
// asserts the bar: no finding above info on a healthy program; every
// labelled defect found with its kind, at its site (a finding's site,
// analysis doc "Sites": its first function, or the helper of a call edge),
// with bytes within 1%; every labelled loop (truth_step) found with its
// step count exactly and its period within 10%. A program named h_* must
// label itself healthy, b_* broken. With VRAMPROF_CORPUS_TABLE set it
// appends the table to the file it names and asserts only that every
// program ran and was labelled (make bench).
func runCorpus(t *testing.T, c *corpusRecording) {
	t.Helper()
	tablePath := os.Getenv(corpusTableEnv)
	tableOnly := tablePath != ""
	progs, outs := c.outcomes(t)
	t.Run("programs", func(t *testing.T) {
		for i, p := range progs {
			t.Run(p.name, func(t *testing.T) {
				o := outs[i]
				require.NotNil(t, o, "not recorded: see record/%s", p.name)
				require.NoError(t, o.err)
				switch {
				case strings.HasPrefix(p.name, "h_"):
					require.True(t, o.healthy, "label: an h_* program is healthy")
				case strings.HasPrefix(p.name, "b_"):
					require.False(t, o.healthy, "label: a b_* program is broken")
				}
				if tableOnly {
					return
				}
				if p.open != "" {
					require.False(t, o.meetsBar(), "%s meets the bar now: take it off the open list (%s)", p.name, p.open)
					t.Logf("open: %s does not meet the bar yet: %s", p.name, p.open)
					return
				}
				for _, j := range o.fp {
					if o.healthy {
						assert.Failf(t, "a finding above info on a healthy program", "%s", o.findings[j])
					} else {
						assert.Failf(t, "a finding of no labelled kind and site", "%s", o.findings[j])
					}
				}
				for i, d := range o.defects {
					if o.found[i] < 0 {
						assert.Failf(t, "a labelled defect not found", "%s at %s, %d bytes (within 1%%); findings: %v",
							d.Kind, d.Site, d.Bytes, o.findings)
					}
				}
				for _, l := range o.loops {
					if !l.right() {
						assert.Failf(t, "a labelled loop not found", "%d x %s every %d ns (period within %.0f%%); found %v: %d every %d ns at %s",
							l.label.Count, l.label.Func, l.label.PeriodNs, 100*corpusPeriodTolerance, l.found, l.count, l.periodNs, l.site)
					}
				}
			})
		}
	})
	var judged []*corpusOutcome
	for _, o := range outs {
		if o != nil {
			judged = append(judged, o)
		}
	}
	var b strings.Builder
	corpusTable(&b, c.title, judged)
	t.Log("\n" + b.String())
	if tableOnly {
		f, err := os.OpenFile(tablePath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		require.NoError(t, err, "open the table file %s named by %s", tablePath, corpusTableEnv)
		_, err = f.WriteString(b.String())
		require.NoError(t, errors.Join(err, f.Close()), "write the table to %s named by %s", tablePath, corpusTableEnv)
	}
}
