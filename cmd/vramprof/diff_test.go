//go:build linux

package main

// End-to-end tests of `vramprof diff`, against the scenarios' truth.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// diffOutput is the part of `diff --format json` these tests read, declared
// here so that a renamed field fails a test.
type diffOutput struct {
	Schema          string          `json:"schema"`
	PeakBytes       diffOutputDelta `json:"peak_bytes"`
	LiveBytesAtEnd  diffOutputDelta `json:"live_bytes_at_end"`
	Devices         []diffOutputRow `json:"devices"`
	Processes       []diffOutputRow `json:"processes"`
	PeakStacks      []diffOutputStk `json:"peak_stacks"`
	LiveAtEndStacks []diffOutputStk `json:"live_at_end_stacks"`
}

type diffOutputDelta struct {
	Base    uint64   `json:"base"`
	New     uint64   `json:"new"`
	Delta   int64    `json:"delta"`
	Percent *float64 `json:"percent"`
}

type diffOutputRow struct {
	Name           string          `json:"name"`
	Status         string          `json:"status"`
	PeakBytes      diffOutputDelta `json:"peak_bytes"`
	LiveBytesAtEnd diffOutputDelta `json:"live_bytes_at_end"`
}

type diffOutputStk struct {
	Frames []string `json:"frames"`
	Site   string   `json:"site"`
	Status string   `json:"status"`
	diffOutputDelta
}

func mustDiff(t *testing.T, base, nw string) (*diffOutput, string) {
	t.Helper()
	r := vramprof(t, execOpts{}, "diff", "--format", "json", base, nw)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	var d diffOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
	return &d, r.stdout
}

// TestDiffSteadyLeak diffs steady against leak: the leak's cache_activations
// stack is new and holds what the truth says is live at the end.
func TestDiffSteadyLeak(t *testing.T) {
	probetest.RequirePrivilege(t)
	steadyDir, steady, r := runScenario(t, "steady")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	leakDir, leak, r := runScenario(t, "leak")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)

	d, out := mustDiff(t, steadyDir, leakDir)
	assert.Equal(t, "vramprof/diff/v1", d.Schema)
	assert.Equal(t, int64(leak.Totals.LiveBytesAtEnd)-int64(steady.Totals.LiveBytesAtEnd), d.LiveBytesAtEnd.Delta)
	assert.Equal(t, leak.Totals.LiveBytesAtEnd, d.LiveBytesAtEnd.New)
	assert.Equal(t, int64(leak.Totals.PeakBytes)-int64(steady.Totals.PeakBytes), d.PeakBytes.Delta)
	if assert.NotNil(t, d.PeakBytes.Percent) {
		want := (float64(leak.Totals.PeakBytes) - float64(steady.Totals.PeakBytes)) / float64(steady.Totals.PeakBytes) * 100
		assert.InDelta(t, want, *d.PeakBytes.Percent, 0.005)
	}
	assert.Nil(t, d.LiveBytesAtEnd.Percent, "no percentage of 0")

	// Every device both ran on: 0.
	if assert.Len(t, d.Devices, 1) {
		assert.Equal(t, "0", d.Devices[0].Name)
		assert.Equal(t, int64(leak.Totals.PeakBytes)-int64(steady.Totals.PeakBytes), d.Devices[0].PeakBytes.Delta)
	}
	// Processes match by command: two programs, one vanished, one new.
	status := map[string]string{}
	for _, p := range d.Processes {
		status[p.Name] = p.Status
	}
	assert.Equal(t, map[string]string{probetest.Bin(t, "steady"): "vanished", probetest.Bin(t, "leak"): "new"}, status)

	var cache []diffOutputStk
	for _, s := range d.LiveAtEndStacks {
		if attribute(s.Frames) == "cache_activations" {
			cache = append(cache, s)
		}
	}
	if assert.Len(t, cache, 1, "one cache_activations stack live at the end") {
		assert.Equal(t, "new", cache[0].Status)
		assert.Equal(t, uint64(0), cache[0].Base)
		assert.Equal(t, leak.ByFunction["cache_activations"].LiveBytesAtEnd, cache[0].New)
		assert.Equal(t, int64(leak.ByFunction["cache_activations"].LiveBytesAtEnd), cache[0].Delta)
	}
	// Largest absolute change first.
	for _, list := range [][]diffOutputStk{d.PeakStacks, d.LiveAtEndStacks} {
		for i := 1; i < len(list); i++ {
			assert.GreaterOrEqual(t, abs(list[i-1].Delta), abs(list[i].Delta), "order")
		}
	}

	// report.json and trace.vpt inputs give the same diff.
	for _, pair := range [][2]string{
		{filepath.Join(steadyDir, "report.json"), filepath.Join(leakDir, "report.json")},
		{filepath.Join(steadyDir, "trace.vpt"), filepath.Join(leakDir, "trace.vpt")},
	} {
		_, other := mustDiff(t, pair[0], pair[1])
		other = strings.ReplaceAll(other, pair[0], steadyDir)
		other = strings.ReplaceAll(other, pair[1], leakDir)
		assert.Equal(t, out, other, "diff %s %s", pair[0], pair[1])
	}

	text := vramprof(t, execOpts{}, "diff", steadyDir, leakDir)
	require.Equal(t, 0, text.code, "stderr: %s", text.stderr)
	live := leak.ByFunction["cache_activations"].LiveBytesAtEnd
	assert.Regexp(t, fmt.Sprintf(`stacks live at the end \(largest change first\):\n  \[new\] \+%d bytes \([^)]*\): 0 -> %d bytes [^\n]* at cache_activations \(`, live, live), text.stdout)
	assert.Contains(t, text.stdout, "[vanished] "+probetest.Bin(t, "steady"))
}

func abs(d int64) int64 {
	if d < 0 {
		return -d
	}
	return d
}

// TestDiffSameProgram diffs two runs of steady: unsymbolized frames (libc
// under ASLR) are blanked, so every stack matches and nothing changed.
func TestDiffSameProgram(t *testing.T) {
	probetest.RequirePrivilege(t)
	a, _, r := runScenario(t, "steady")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	b, _, r := runScenario(t, "steady")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	d, _ := mustDiff(t, a, b)
	assert.Zero(t, d.PeakBytes.Delta)
	require.NotEmpty(t, d.PeakStacks)
	for _, s := range d.PeakStacks {
		assert.Equal(t, "unchanged", s.Status, "%v", s.Frames)
	}
	for _, p := range d.Processes {
		assert.Equal(t, "unchanged", p.Status, p.Name)
	}
}

// TestDiffBadInput: unreadable inputs and wrong schemas are one line, exit 2.
func TestDiffBadInput(t *testing.T) {
	tmp := t.TempDir()
	wrong := filepath.Join(tmp, "wrong.json")
	require.NoError(t, os.WriteFile(wrong, []byte(`{"schema": "vramprof/report/v0"}`), 0o644))
	corrupt := filepath.Join(tmp, "corrupt.json")
	require.NoError(t, os.WriteFile(corrupt, []byte(`{"schema": `), 0o644))
	junk := filepath.Join(tmp, "junk.vpt")
	require.NoError(t, os.WriteFile(junk, []byte("not a trace at all"), 0o644))
	empty := t.TempDir()
	for _, tc := range []struct {
		name  string
		args  []string
		words []string
	}{
		{"one_arg", []string{"diff", wrong}, []string{"BASE and NEW"}},
		{"bad_format", []string{"diff", wrong, wrong, "--format", "xml"}, []string{"xml"}},
		{"missing", []string{"diff", filepath.Join(tmp, "nope"), wrong}, []string{"BASE", "nope", "no such file"}},
		{"wrong_schema", []string{"diff", corrupt, wrong}, []string{"BASE", "not valid JSON"}},
		{"wrong_schema_new", []string{"diff", empty, wrong}, []string{"BASE", "neither trace.vpt nor report.json"}},
		{"schema", []string{"diff", wrong, wrong}, []string{"vramprof/report/v0", "vramprof/report/v1"}},
		{"junk_trace", []string{"diff", junk, junk}, []string{"junk.vpt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := vramprof(t, execOpts{dir: t.TempDir()}, tc.args...)
			assertToolError(t, r, tc.words...)
			assert.Empty(t, r.stdout)
		})
	}
}
