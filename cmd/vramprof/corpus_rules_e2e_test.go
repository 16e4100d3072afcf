//go:build linux

package main

// One corpus test per rule of analysis/rules (issue 18, item 7): each reads
// the labelled corpora (testdata/corpus on the fake caching allocator, and
// torchdrv's scenarios on PyTorch's real libc10_cuda.so), recorded once for
// all of them and for TestFindingsCorpus (corpusRecording), and holds its
// rule's kinds alone to the bar: every labelled defect of the kind found
// at its site with its bytes, and no finding of the kind above info that
// no label explains. The expected values are the programs' own truth
// (their labels), never vramprof's output.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis/rules"
	"github.com/vramprof/vramprof/probes/probetest"
)

func TestCorpusOOM(t *testing.T)           { corpusRule(t, "OOM") }
func TestCorpusLeak(t *testing.T)          { corpusRule(t, "Leak") }
func TestCorpusCache(t *testing.T)         { corpusRule(t, "Cache") }
func TestCorpusFragmentation(t *testing.T) { corpusRule(t, "Fragmentation") }
func TestCorpusChurn(t *testing.T)         { corpusRule(t, "Churn") }
func TestCorpusSpike(t *testing.T)         { corpusRule(t, "Spike") }
func TestCorpusPinned(t *testing.T)        { corpusRule(t, "Pinned") }
func TestCorpusImbalance(t *testing.T)     { corpusRule(t, "Imbalance") }

// TestCorpusRulesCovered fails when a rule of rules.All has no corpus test
// TestCorpus<Name> in this package.
func TestCorpusRulesCovered(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	tests := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				tests[fd.Name.Name] = true
			}
		}
	}
	require.NotEmpty(t, rules.All)
	for _, r := range rules.All {
		assert.True(t, tests["TestCorpus"+r.Name], "rule %s (kinds %v) has no corpus test TestCorpus%s", r.Name, r.Kinds, r.Name)
	}
}

// corpusRule holds rule name's kinds to the bar on both corpora.
func corpusRule(t *testing.T, name string) {
	probetest.RequirePrivilege(t)
	i := slices.IndexFunc(rules.All, func(r rules.Rule) bool { return r.Name == name })
	require.GreaterOrEqual(t, i, 0, "no rule %s in rules.All", name)
	rule := rules.All[i]
	labelled := 0
	for _, c := range []*corpusRecording{fakeCorpus, torchCorpus} {
		t.Run(c.title, func(t *testing.T) {
			progs, outs := c.outcomes(t)
			labelled += corpusRuleCheck(t, rule, progs, outs)
		})
	}
	if labelled == 0 {
		t.Logf("rule %s: no program of either corpus labels a defect of its kinds %v: precision only "+
			"(no finding of them above info that no label explains)", name, rule.Kinds)
	}
}

// corpusRuleCheck judges rule's kinds on one corpus's outcomes: it logs
// the kinds' true positives, false positives and misses, with each
// program's finding or miss of them, and fails on a false positive or a
// miss of a program that is not on its corpus's open list (an open one is
// counted and logged). It returns the labelled defects of the kinds.
func corpusRuleCheck(t *testing.T, rule rules.Rule, progs []corpusProgram, outs []*corpusOutcome) (labelled int) {
	t.Helper()
	var judged, strict []*corpusOutcome
	for i, p := range progs {
		o := outs[i]
		switch {
		case o == nil:
			assert.Failf(t, "a program not recorded", "%s: see record/%s", p.name, p.name)
			continue
		case o.err != nil:
			assert.Failf(t, "a program not judged", "%s: %v", p.name, o.err)
			continue
		}
		judged = append(judged, o)
		if p.open == "" {
			strict = append(strict, o)
		}
	}
	all, bar := corpusRows(judged), corpusRows(strict)
	var b strings.Builder
	for _, k := range rule.Kinds {
		r := corpusRow{}
		if all[k] != nil {
			r = *all[k]
		}
		labelled += r.tp + r.miss
		fmt.Fprintf(&b, "rule %s, kind %s: %d programs judged: TP %d | FP %d | miss %d\n", rule.Name, k, len(judged), r.tp, r.fp, r.miss)
		for _, o := range judged {
			for i, d := range o.defects {
				if d.Kind != k {
					continue
				}
				verdict := "found"
				if o.found[i] < 0 {
					verdict = "MISS"
				}
				fmt.Fprintf(&b, "    %s: label %s at %s, %d bytes: %s\n", o.name, d.Kind, d.Site, d.Bytes, verdict)
			}
			for _, j := range o.fp {
				if o.findings[j].Kind == k {
					fmt.Fprintf(&b, "    %s: finding %s [FP]\n", o.name, o.findings[j])
				}
			}
		}
		if r := bar[k]; r != nil {
			assert.Zero(t, r.fp, "%s: findings above info that no label explains (see the log)", k)
			assert.Zero(t, r.miss, "%s: labelled defects not found (see the log)", k)
		}
	}
	t.Log("\n" + b.String())
	return labelled
}
