//go:build linux

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestCorpusJudge: the corpus's matching rules on hand-made findings, so
// that the table TestFindingsCorpus prints means what it says. A defect is
// found by a finding of its kind, at its site (the site's first function,
// the helper of a call edge, or an oom's failing request), with bytes
// within 1%; a finding above info that names no labelled kind and site is a
// false positive; info findings never count.
func TestCorpusJudge(t *testing.T) {
	stack := func(site string) []ReportStack {
		return []ReportStack{{Site: site, Frames: []string{"c10_alloc (c10/c10_cuda.cpp:1)", site}}}
	}
	rep := &corpusReport{Findings: []corpusReportFinding{
		{Kind: "peak", Severity: "info", Bytes: 1 << 30, Stacks: stack("load_model (corpus/corpus.h:5)")},
		// 1 MiB labelled; just under 1% off (10476 of 1048576) is within.
		{Kind: "leak", Severity: "high", Bytes: 1038100, Stacks: stack("leak_step (corpus/b.c:10)")},
		// Its site is the helper of a call edge.
		{Kind: "leak", Severity: "medium", Bytes: 4 << 20, Stacks: stack("train_step (corpus/b.c:20) -> keep (corpus/b.c:30)")},
		// Right kind and site, bytes 5% off: a near miss, not a false positive.
		{Kind: "leak", Severity: "high", Bytes: 2 << 20 * 105 / 100, Stacks: stack("log_metrics (corpus/b.c:40)")},
		// An oom's site is its failing request, not what was live.
		{Kind: "oom", Severity: "critical", Bytes: 16 << 20, Stacks: stack("bank (corpus/b.c:50)"),
			OOM: &corpusOOM{Site: "grow_batch (corpus/b.c:60)"}},
		// No site at all: a false positive.
		{Kind: "fragmentation", Severity: "medium", Bytes: 100},
	}}
	o := &corpusOutcome{name: "b_judge", defects: []probetest.Defect{
		{Kind: "leak", Site: "leak_step", Bytes: 1 << 20},
		{Kind: "leak", Site: "keep", Bytes: 4 << 20},
		{Kind: "leak", Site: "log_metrics", Bytes: 2 << 20},
		{Kind: "oom", Site: "grow_batch", Bytes: 16 << 20},
		{Kind: "spike", Site: "save_checkpoint", Bytes: 1 << 20},
	}, loops: []corpusLoop{
		{pid: 10, label: probetest.Steps{Func: "train_step", Count: 60, PeriodNs: 2_000_000}},
		{pid: 11, label: probetest.Steps{Func: "train_step", Count: 50, PeriodNs: 2_000_000}},
		{pid: 12, label: probetest.Steps{Func: "train_step", Count: 40, PeriodNs: 2_000_000}},
	}}
	// Loops: pid 10's within 10% (right), pid 11's one step short (wrong),
	// pid 12's not found.
	rep.Iterations = []corpusIterations{
		{PID: 10, Count: 60, PeriodNs: 2_150_000, Site: "train_step (corpus/b.c:5)"},
		{PID: 11, Count: 49, PeriodNs: 2_000_000, Site: "train_step (corpus/b.c:5)"},
	}
	judge(o, rep)
	assert.Equal(t, []bool{true, false, false}, []bool{o.loops[0].right(), o.loops[1].right(), o.loops[2].right()}, "loops")
	assert.Equal(t, []int{1, 2, -1, 4, -1}, o.found, "found: the finding each defect matched")
	assert.Equal(t, []int{-1, -1, 3, -1, -1}, o.near, "near: right kind and site, bytes off")
	assert.Equal(t, []int{5}, o.fp, "false positives: the siteless fragmentation finding only")

	var b strings.Builder
	_, _, found, broken := corpusTable(&b, "corpus", []*corpusOutcome{o})
	assert.Equal(t, 0, found, "a broken program with a missed defect is not found")
	assert.Equal(t, 1, broken)
	table := b.String()
	require.Contains(t, table, "leak                 |   2 |   0 |    1\n")
	require.Contains(t, table, "oom                  |   1 |   0 |    0\n")
	require.Contains(t, table, "spike                |   0 |   0 |    1\n")
	require.Contains(t, table, "fragmentation        |   0 |   1 |    0\n")
	assert.Contains(t, table, "loops: 1/3 processes")
	assert.Contains(t, table, "loop: 40 x train_step every 2.00 ms; no loop found [wrong]")
	assert.Contains(t, table, "b_judge: label leak at log_metrics, 2097152 bytes: MISS (leak at its site with 2202009 bytes: +5.00%)")
}

// TestCorpusJudgeCppSites: torchdrv's functions are C++ (an anonymous
// namespace), its labels name them as the source spells them; a stack with
// no site is charged past the allocator's stripped frames.
func TestCorpusJudgeCppSites(t *testing.T) {
	rep := &corpusReport{Findings: []corpusReportFinding{
		{Kind: "leak", Severity: "high", Bytes: 40 << 20, Stacks: []ReportStack{{
			Site: "(anonymous namespace)::leak_step (testdata/torch/torchdrv.cpp:194)"}}},
		{Kind: "oom", Severity: "critical", Bytes: 16 << 20, OOM: &corpusOOM{Frames: []string{
			"cudaMalloc (cuda/cudart.c:199)", "0x7f4b785d1e83 (libc10_cuda.so.2.6)",
			"(anonymous namespace)::grow_batch (testdata/torch/torchdrv.cpp:300)"}}},
	}}
	o := &corpusOutcome{name: "b_cpp", defects: []probetest.Defect{
		{Kind: "leak", Site: "leak_step", Bytes: 40 << 20},
		{Kind: "oom", Site: "grow_batch", Bytes: 16 << 20},
	}}
	judge(o, rep)
	assert.Equal(t, []int{0, 1}, o.found, "found at their C++ sites")
	assert.Empty(t, o.fp)
	assert.Equal(t, "leak_step", cFunction("(anonymous namespace)::leak_step"))
	assert.Equal(t, "leak_step", cFunction("leak_step"))
}
