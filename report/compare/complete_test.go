package compare

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withRun writes testdata/base/report.json with its "run" object changed
// by edit, and returns the new file's path.
func withRun(tb testing.TB, edit func(run map[string]any)) string {
	tb.Helper()
	data, err := os.ReadFile(fixture("base"))
	require.NoError(tb, err)
	var j map[string]any
	require.NoError(tb, json.Unmarshal(data, &j))
	edit(j["run"].(map[string]any))
	out, err := json.Marshal(j)
	require.NoError(tb, err)
	path := filepath.Join(tb.TempDir(), "report.json")
	require.NoError(tb, os.WriteFile(path, out, 0o644))
	return path
}

// TestIncompleteIsUnknown: a recording that is no whole run (cut short, a
// moment report, or saying so in run.complete) gets no verdict, whatever
// its figures: base's peak, 3407872 bytes, is far below the 1 GiB limit,
// and the verdict is still UNKNOWN, with the reason in the text, the step
// summary, the annotations and JUnit, and no baseline written.
func TestIncompleteIsUnknown(t *testing.T) {
	const cutReason = "cut short: the trace ends without its End record"
	for _, tc := range []struct {
		name string
		edit func(run map[string]any)
		want string
	}{
		{"cut", func(run map[string]any) {
			run["ended_cleanly"], run["complete"] = false, false
			run["incomplete_reasons"] = []string{cutReason + " (vramprof was killed)"}
		}, cutReason + " (vramprof was killed)"},
		// A report.json from before run.complete: its end says it.
		{"cut, older report", func(run map[string]any) { run["ended_cleanly"] = false },
			"cut short: the trace ends without its End record (ended_cleanly false)"},
		{"moment, older report", func(run map[string]any) {
			run["moment"] = map[string]any{"kind": "oom", "index": 2, "time_ns": 5}
		}, "a moment report (oom 2)"},
		{"complete false", func(run map[string]any) { run["complete"] = false },
			"report.json says the recording is incomplete (run.complete false)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := LoadReport("rec", withRun(t, tc.edit))
			require.NoError(t, err)
			v := Judge(s, nil, Limits{MaxPeak: u64(1 << 30)}, nil)
			assert.True(t, v.Unknown())
			regression, err := v.Outcome()
			assert.False(t, regression)
			require.ErrorIs(t, err, ErrIncomplete)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(v.Header(), "UNKNOWN: the recording is incomplete ("+tc.want), v.Header())

			text := textOf(v)
			assert.Contains(t, text, "WARNING: incomplete recording: "+tc.want)
			assert.Contains(t, text, "UNKNOWN  complete      incomplete: "+tc.want)
			assert.Contains(t, text, "PASS  max-peak      peak 3407872 bytes", "the limit check is still shown")

			var ann bytes.Buffer
			v.WriteAnnotations(&ann)
			assert.Contains(t, ann.String(), "::error title=vramprof check%3A complete::the recording is incomplete ("+tc.want)

			var md bytes.Buffer
			require.NoError(t, v.WriteMarkdown(&md))
			assert.Contains(t, md.String(), "## vramprof check: UNKNOWN: ")
			assert.Contains(t, md.String(), "> **Warning:** incomplete recording: "+tc.want)
			assert.Contains(t, md.String(), "| complete | **UNKNOWN** |")

			doc := v.JUnit()
			var found bool
			for _, c := range doc.Suites[0].Testcases {
				if c.Name == "complete" {
					found = true
					require.NotNil(t, c.Error, "an incomplete recording is a JUnit error")
					assert.Equal(t, "incomplete recording", c.Error.Type)
					assert.Contains(t, c.Error.Message, tc.want)
				}
			}
			assert.True(t, found, "a complete testcase")

			baseline := filepath.Join(t.TempDir(), "baseline.json")
			_, err = v.Publish(&bytes.Buffer{}, Outputs{Baseline: baseline, WriteFile: func(path string, write func(w io.Writer) error) error {
				t.Errorf("no file written for an unknown verdict, got %s", path)
				return nil
			}})
			require.ErrorIs(t, err, ErrIncomplete)
		})
	}

	// The control: the same figures, whole, pass.
	s := mustLoad(t, "base")
	assert.Empty(t, s.Incomplete)
	v := Judge(s, nil, Limits{MaxPeak: u64(1 << 30)}, nil)
	regression, err := v.Outcome()
	assert.False(t, regression)
	require.NoError(t, err)
	assert.Equal(t, "PASS (1 check)", v.Header())
}

// TestIncompleteBaseline: a baseline that is no whole run makes the
// verdict unknown too, even though new's peak (3748659) is within +10% of
// base's (3407872 * 1.1 = 3748659.2).
func TestIncompleteBaseline(t *testing.T) {
	base, err := LoadBaseline(withRun(t, func(run map[string]any) { run["ended_cleanly"] = false }))
	require.NoError(t, err)
	v := Judge(mustLoad(t, "new"), base, Limits{MaxIncrease: rat(t, "10"), MaxIncreaseText: "10"}, nil)
	assert.True(t, v.Unknown())
	_, err = v.Outcome()
	require.ErrorIs(t, err, ErrIncomplete)
	assert.Contains(t, err.Error(), "the baseline is incomplete (cut short")
	assert.Contains(t, textOf(v), "PASS  max-increase  peak 3748659 bytes")

	whole := Judge(mustLoad(t, "new"), mustLoad(t, "base"), Limits{MaxIncrease: rat(t, "10"), MaxIncreaseText: "10"}, nil)
	_, err = whole.Outcome()
	require.NoError(t, err, "the same figures against a whole baseline pass")

	// A baseline file keeps the reasons: written from base (whole) it has
	// none; from the cut one, it reads back incomplete.
	for _, tc := range []struct {
		snap *Figures
		want []string
	}{{mustLoad(t, "base"), nil}, {base, base.Incomplete}} {
		var buf bytes.Buffer
		require.NoError(t, WriteBaseline(&buf, tc.snap, "vramprof 9.9"))
		assert.Equal(t, tc.want != nil, strings.Contains(buf.String(), "incomplete_reasons"), "%s", buf.String())
		path := filepath.Join(t.TempDir(), "baseline.json")
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
		b, err := LoadBaseline(path)
		require.NoError(t, err)
		assert.Equal(t, tc.want, b.Incomplete)
	}
}

// TestNoFigures: a recording that cannot be read into figures (segments
// that do not follow each other) is judged on nothing but that.
func TestNoFigures(t *testing.T) {
	s := &Figures{Source: "dir", NoFigures: true, Incomplete: []string{"inconsistent segments: segment 2 is missing"}}
	v := Judge(s, nil, Limits{MaxPeak: u64(1 << 30)}, nil)
	require.Len(t, v.Checks, 1)
	assert.Equal(t, "complete", v.Checks[0].Name)
	text := textOf(v)
	assert.Contains(t, text, "figures: none")
	assert.NotContains(t, text, "peak 0 bytes")
	_, err := v.Outcome()
	require.ErrorIs(t, err, ErrIncomplete)
}
