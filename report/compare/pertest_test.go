package compare

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/report/pytests"
)

func TestParseTestLimits(t *testing.T) {
	ls, err := ParseTestLimits("l.txt", []byte("# per-test limits\n\ntests/test_x.py::test_big 2GiB\n  tests/test_io.py::*\t512MiB  # io\n"))
	require.NoError(t, err)
	require.Len(t, ls, 2)
	assert.Equal(t, uint64(2<<30), ls[0].Bytes)
	assert.Equal(t, "l.txt:3", ls[0].Where)
	assert.Equal(t, uint64(512<<20), ls[1].Bytes)
	assert.Equal(t, "l.txt:4", ls[1].Where)
	assert.True(t, ls[1].Match("tests/test_io.py::TestA::test_b"), "* crosses ::")
	assert.False(t, ls[1].Match("tests/test_iox.py::test_b"))
	assert.True(t, ls[0].Match("tests/test_x.py::test_big"))
	assert.False(t, ls[0].Match("tests/test_x.py::test_bigger"), "anchored")
	q, err := ParseTestLimits("q", []byte("t?st.py::a.b 1\n"))
	require.NoError(t, err)
	assert.True(t, q[0].Match("test.py::a.b"))
	assert.False(t, q[0].Match("test.py::aXb"), "a dot is a dot")

	for _, tc := range []struct{ text, want string }{
		{"tests/test_x.py::test_big\n", `l.txt:1: "tests/test_x.py::test_big" is not a limit; write one test id (a glob) and a size per line, such as "tests/test_x.py::test_big 2GiB"`},
		{"a 1 GiB\n", `l.txt:1: "a 1 GiB" is not a limit`},
		{"\na lots\n", `l.txt:2: size "lots"`},
	} {
		_, err := ParseTestLimits("l.txt", []byte(tc.text))
		require.Error(t, err, tc.text)
		assert.Contains(t, err.Error(), tc.want)
	}

	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("# nothing\n"), 0o644))
	_, err = ParseLimits(LimitFlags{LimitsFile: empty})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "holds no limit")
	_, err = ParseLimits(LimitFlags{LimitsFile: filepath.Join(dir, "missing")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--limits: open")
	l, err := ParseLimits(LimitFlags{MaxPeakPerTest: strp("1MiB")})
	require.NoError(t, err, "a per-test limit alone is something to check")
	assert.Equal(t, uint64(1<<20), *l.MaxPeakPerTest)
}

// perTestFigures has three pytest tests: test_small peaks at 12 MiB,
// test_big at 96 MiB, test_leaks at 16 MiB and leaks 3 MiB.
func perTestFigures() *Figures {
	s := FromReport(oomReport(), "rec")
	s.OOMs = nil
	s.TestsRead = true
	s.Tests = []pytests.Test{
		{ID: "tests/t_test.py::test_small", PeakBytes: 12 << 20, Allocations: 2, AllocatedBytes: 12 << 20, Layer: "segment"},
		{ID: "tests/t_test.py::TestM::test_big", PeakBytes: 96 << 20, Allocations: 2, AllocatedBytes: 96 << 20, Layer: "segment",
			PeakSite: "TestM.test_big (/repo/tests/t_test.py:108)"},
		{ID: "tests/t_test.py::test_leaks", PeakBytes: 16 << 20, LeakedBytes: 3 << 20, LeakedAllocations: 1, Layer: "segment"},
	}
	return s
}

// TestPerTestLimits: each test is judged against the first limits-file
// line matching it, else --max-peak-per-test; a test under neither is
// shown, not judged; a line that matched no test is warned about. One
// JUnit testcase per test, named by its node id, a failure for the one
// over its limit, with an annotation at its peak's line.
func TestPerTestLimits(t *testing.T) {
	tl, err := ParseTestLimits("l.txt", []byte("tests/t_test.py::TestM::* 80MiB\ntests/t_test.py::test_big 1GiB\ntests/gone.py::* 1\n"))
	require.NoError(t, err)
	v := Judge(perTestFigures(), nil, Limits{MaxPeakPerTest: u64(16 << 20), TestLimits: tl}, intp(0))
	assert.Equal(t, "FAIL: memory regression (1 of 3 checks failed)", v.Header())
	text := textOf(v)
	for _, want := range []string{
		"WARNING: l.txt:3: tests/gone.py::* matched no test",
		"per pytest test (its own allocations at the segment layer",
		"PASS  tests/t_test.py::test_small: peak 12582912 bytes (12.00 MiB), leaked 0 bytes (0 B) in 0 allocations; limit 16777216 bytes (16.00 MiB) (--max-peak-per-test); margin 4194304 bytes (4.00 MiB)",
		"FAIL  tests/t_test.py::TestM::test_big: peak 100663296 bytes (96.00 MiB), leaked 0 bytes (0 B) in 0 allocations; limit 83886080 bytes (80.00 MiB) (l.txt:1); over by 16777216 bytes (16.00 MiB)",
		"PASS  tests/t_test.py::test_leaks: peak 16777216 bytes (16.00 MiB), leaked 3145728 bytes (3.00 MiB) in 1 allocation; limit 16777216 bytes (16.00 MiB) (--max-peak-per-test); margin 0 bytes",
	} {
		assert.Contains(t, text, want)
	}
	var junit bytes.Buffer
	require.NoError(t, v.WriteJUnit(&junit))
	doc := junit.String()
	assert.Contains(t, doc, `<testcase name="tests/t_test.py::TestM::test_big" classname="vramprof.check.pytest">`)
	assert.Contains(t, doc, `<failure message="tests/t_test.py::TestM::test_big: its allocations peaked at 100663296 bytes (96.00 MiB), over its limit 83886080 bytes (80.00 MiB) (l.txt:1) by 16777216 bytes (16.00 MiB)" type="memory regression">`)
	assert.Equal(t, 4, strings.Count(doc, "<testcase "), "command and one per test")

	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "tests"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "tests", "t_test.py"), nil, 0o644))
	v.Figures.Tests[1].PeakSite = "TestM.test_big (" + root + "/tests/t_test.py:108)"
	v = Judge(v.Figures, nil, Limits{MaxPeakPerTest: u64(16 << 20), TestLimits: tl}, intp(0))
	v.SourceRoot = root
	var ann bytes.Buffer
	v.WriteAnnotations(&ann)
	assert.Equal(t, "::error file=tests/t_test.py,line=108,title=vramprof check%3A tests/t_test.py%3A%3ATestM%3A%3Atest_big::"+
		"tests/t_test.py::TestM::test_big: its allocations peaked at 100663296 bytes (96.00 MiB), over its limit 83886080 bytes (80.00 MiB) (l.txt:1) by 16777216 bytes (16.00 MiB); the peak was reached here\n",
		ann.String())

	// No limit at all: the figures are shown and in JUnit, nothing judged.
	v = Judge(perTestFigures(), nil, Limits{MaxPeak: u64(1 << 40)}, nil)
	assert.Equal(t, "PASS (1 check)", v.Header())
	assert.Contains(t, textOf(v), "INFO  tests/t_test.py::test_leaks: peak 16777216 bytes (16.00 MiB), leaked 3145728 bytes (3.00 MiB) in 1 allocation; no limit")
}

// TestPerTestUnjudged: per-test limits on a recording without per-test
// figures (a report.json, or no test frame in any stack) give no verdict
// (exit 2), saying why.
func TestPerTestUnjudged(t *testing.T) {
	s := perTestFigures()
	s.Tests, s.TestsRead = nil, false
	v := Judge(s, nil, Limits{MaxPeakPerTest: u64(1)}, nil)
	_, err := v.Outcome()
	require.ErrorIs(t, err, ErrNoTests)
	assert.Contains(t, v.Header(), "UNKNOWN: per-test limits need the recording's trace")

	s.TestsRead = true
	v = Judge(s, nil, Limits{MaxPeakPerTest: u64(1), MaxPeak: u64(1)}, nil)
	regression, err := v.Outcome()
	require.ErrorIs(t, err, ErrNoTests, "unknown even with another limit failing")
	assert.False(t, regression)
	assert.Contains(t, v.Header(), "UNKNOWN: no allocation was made in a pytest test")
	var junit bytes.Buffer
	require.NoError(t, v.WriteJUnit(&junit))
	assert.Contains(t, junit.String(), `type="no per-test figures"`)
}

// TestPerTestBasis: the text and the JUnit suite say how the tests were
// told apart: all by pytest's phases, or some by their frames.
func TestPerTestBasis(t *testing.T) {
	tests := []struct {
		name, frames, text, basis string
	}{
		{"phases", "", "at the segment layer; made while pytest ran it (PYTEST_CURRENT_TEST), setup and teardown included; " +
			"peak: the most live at once; leaked: live after its teardown):", "phases"},
		{"mixed", "tests/t_test.py::test_leaks", "at the segment layer; made while pytest ran it (PYTEST_CURRENT_TEST), setup and " +
			"teardown included, or where that was not recorded, under its frame;", "mixed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := perTestFigures()
			for i := range s.Tests {
				s.Tests[i].Basis = pytests.BasisPhases
				if s.Tests[i].ID == tt.frames {
					s.Tests[i].Basis = pytests.BasisFrames
				}
			}
			v := Judge(s, nil, Limits{MaxPeakPerTest: u64(1 << 30)}, intp(0))
			assert.Contains(t, textOf(v), tt.text)
			var junit bytes.Buffer
			require.NoError(t, v.WriteJUnit(&junit))
			assert.Contains(t, junit.String(), `<property name="vramprof.pytest.basis" value="`+tt.basis+`"></property>`)
			assert.Contains(t, junit.String(), "limit 1073741824 bytes (1.00 GiB) (--max-peak-per-test); basis phases; margin")
		})
	}
}
