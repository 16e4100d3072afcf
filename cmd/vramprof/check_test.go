//go:build linux

package main

// End-to-end tests of `vramprof check`. Limits and expected figures come
// from the scenarios' truth (and arithmetic on it), never from vramprof.

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// checkScenario runs `vramprof check ARGS... -- <scenario>` and returns the
// result and the truth the scenario wrote.
func checkScenario(t *testing.T, name string, env []string, args ...string) (result, *probetest.Truth) {
	t.Helper()
	truthPath := filepath.Join(t.TempDir(), "truth.json")
	args = append(append([]string{"check"}, args...), "--", probetest.Bin(t, name))
	r := vramprof(t, execOpts{env: append(env, "VRAMPROF_TRUTH="+truthPath), dir: t.TempDir()}, args...)
	return r, probetest.MustReadTruth(t, truthPath)
}

// topPeakFunction is the function holding the most bytes at the peak, by
// the truth.
func topPeakFunction(truth *probetest.Truth) string {
	top, bytes := "", uint64(0)
	for fn, f := range truth.ByFunction {
		if f.LiveBytesAtPeak > bytes || f.LiveBytesAtPeak == bytes && fn < top {
			top, bytes = fn, f.LiveBytesAtPeak
		}
	}
	return top
}

// junitProperty is a property of a JUnit suite.
type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

// junitDoc is the part of a JUnit file CI systems read.
type junitDoc struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Errors   int      `xml:"errors,attr"`
	Suites   []struct {
		Properties []junitProperty `xml:"properties>property"`
		Cases      []struct {
			Name    string `xml:"name,attr"`
			Failure *struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func mustReadJUnit(t *testing.T, path string) *junitDoc {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc junitDoc
	require.NoError(t, xml.Unmarshal(data, &doc), "parse %s:\n%s", path, data)
	require.Len(t, doc.Suites, 1)
	return &doc
}

// failedCases maps each testcase to its failure message, "" when it passed,
// "error: ..." for an error.
func failedCases(doc *junitDoc) map[string]string {
	out := map[string]string{}
	for _, c := range doc.Suites[0].Cases {
		switch {
		case c.Failure != nil:
			out[c.Name] = c.Failure.Message
		case c.Error != nil:
			out[c.Name] = "error: " + c.Error.Message
		default:
			out[c.Name] = ""
		}
	}
	return out
}

// TestCheckMaxPeak gates steady on its own peak: the exact peak passes, one
// byte less fails and names the stack that holds the most at the peak.
func TestCheckMaxPeak(t *testing.T) {
	probetest.RequirePrivilege(t)
	dir, truth, r := runScenario(t, "steady")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	peak := truth.Totals.PeakBytes

	t.Run("command_passes_at_peak", func(t *testing.T) {
		r, again := checkScenario(t, "steady", nil, "--max-peak", strconv.FormatUint(peak, 10))
		require.Equal(t, peak, again.Totals.PeakBytes, "steady is deterministic")
		assert.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		assert.Contains(t, r.stdout, "vramprof check: PASS (1 check)")
		assert.Contains(t, r.stdout, "PASS  command       exit code 0")
		assert.Contains(t, r.stdout, fmt.Sprintf("PASS  max-peak      peak %d bytes", peak))
		assert.Contains(t, r.stdout, "margin 0 bytes (0 B)")
	})

	t.Run("command_fails_below_peak", func(t *testing.T) {
		r, _ := checkScenario(t, "steady", nil, "--max-peak", strconv.FormatUint(peak-1, 10))
		assert.Equal(t, exitCheckRegression, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		assert.Contains(t, r.stdout, "vramprof check: FAIL: memory regression (1 of 1 check failed)")
		assert.Contains(t, r.stdout, fmt.Sprintf("FAIL  max-peak      peak %d bytes", peak))
		assert.Contains(t, r.stdout, fmt.Sprintf("limit %d bytes", peak-1))
		assert.Contains(t, r.stdout, "over by 1 byte (1 B)")
		top := topPeakFunction(truth)
		require.NotEmpty(t, top)
		assert.Contains(t, r.stdout, fmt.Sprintf("top stacks at the peak:\n  1. %d bytes", truth.ByFunction[top].LiveBytesAtPeak))
		assert.Regexp(t, `top stacks at the peak:\n  1\. [^\n]* at `+top+` \(`, r.stdout)
	})

	t.Run("input_dir", func(t *testing.T) {
		at := vramprof(t, execOpts{}, "check", "--max-peak", strconv.FormatUint(peak, 10), "--max-leak", "0", dir)
		assert.Equal(t, 0, at.code, "stdout:\n%s\nstderr:\n%s", at.stdout, at.stderr)
		assert.Contains(t, at.stdout, "PASS  max-leak      live at end 0 bytes (0 B)")
		assert.NotContains(t, at.stdout, "command ", "no command check when judging a recording")

		junit := filepath.Join(t.TempDir(), "j.xml")
		below := vramprof(t, execOpts{}, "check", "--junit", junit, "--max-peak", strconv.FormatUint(peak-1, 10), "--max-leak", "0", dir)
		assert.Equal(t, exitCheckRegression, below.code, "stdout:\n%s\nstderr:\n%s", below.stdout, below.stderr)
		doc := mustReadJUnit(t, junit)
		assert.Equal(t, 2, doc.Tests)
		assert.Equal(t, 1, doc.Failures)
		assert.Equal(t, 0, doc.Errors)
		cases := failedCases(doc)
		assert.Equal(t, "", cases["max-leak"])
		assert.Contains(t, cases["max-peak"], fmt.Sprintf("peak %d bytes", peak))
		assert.Contains(t, cases["max-peak"], "by 1 byte")

		// Deterministic: the same recording, the same verdict and files,
		// byte for byte; its trace and its report.json judge alike.
		junit2 := filepath.Join(t.TempDir(), "j.xml")
		again := vramprof(t, execOpts{}, "check", "--junit", junit2, "--max-peak", strconv.FormatUint(peak-1, 10), "--max-leak", "0", dir)
		assert.Equal(t, below.stdout, again.stdout)
		a, _ := os.ReadFile(junit)
		b, _ := os.ReadFile(junit2)
		assert.Equal(t, string(a), string(b))
		for _, in := range []string{filepath.Join(dir, "trace.vpt"), filepath.Join(dir, "report.json")} {
			other := vramprof(t, execOpts{}, "check", "--max-peak", strconv.FormatUint(peak-1, 10), "--max-leak", "0", in)
			assert.Equal(t, exitCheckRegression, other.code)
			assert.Equal(t, below.stdout, strings.ReplaceAll(other.stdout, "recording: "+in, "recording: "+dir), in)
		}
	})
}

// TestCheckBaseline writes steady's baseline and gates spike on it: spike's
// peak is far above steady's.
func TestCheckBaseline(t *testing.T) {
	probetest.RequirePrivilege(t)
	tmp := t.TempDir()
	base := filepath.Join(tmp, "base.json")
	r, steady := checkScenario(t, "steady", nil, "--write-baseline", base)
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)

	var b struct {
		Schema         string `json:"schema"`
		PeakBytes      uint64 `json:"peak_bytes"`
		LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
		Devices        []struct {
			Device    string `json:"device"`
			PeakBytes uint64 `json:"peak_bytes"`
		} `json:"devices"`
		Processes []struct {
			Command   string `json:"command"`
			PeakBytes uint64 `json:"peak_bytes"`
		} `json:"processes"`
		PeakStacks []struct {
			Frames []string `json:"frames"`
			Bytes  uint64   `json:"bytes"`
		} `json:"peak_stacks"`
	}
	data, err := os.ReadFile(base)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &b))
	assert.Equal(t, "vramprof/baseline/v1", b.Schema)
	assert.Equal(t, steady.Totals.PeakBytes, b.PeakBytes)
	assert.Equal(t, steady.Totals.LiveBytesAtEnd, b.LiveBytesAtEnd)
	if assert.Len(t, b.Devices, 1) {
		assert.Equal(t, "0", b.Devices[0].Device)
		assert.Equal(t, steady.Totals.PeakBytes, b.Devices[0].PeakBytes)
	}
	if assert.Len(t, b.Processes, 1) {
		assert.Equal(t, probetest.Bin(t, "steady"), b.Processes[0].Command)
	}
	var stackSum uint64
	for _, s := range b.PeakStacks {
		stackSum += s.Bytes
		for _, f := range s.Frames {
			assert.NotRegexp(t, `^0x`, f, "addresses are blanked")
		}
	}
	assert.Equal(t, steady.Totals.PeakBytes, stackSum, "peak stacks sum to the peak")

	out := filepath.Join(tmp, "spike-out")
	junit := filepath.Join(tmp, "j.xml")
	summary := filepath.Join(tmp, "summary.md")
	r, spike := checkScenario(t, "spike", []string{"GITHUB_ACTIONS=true", "GITHUB_STEP_SUMMARY=" + summary},
		"-o", out, "--junit", junit, "--baseline", base, "--max-increase", "10")
	assert.Equal(t, exitCheckRegression, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	increase := (float64(spike.Totals.PeakBytes) - float64(steady.Totals.PeakBytes)) / float64(steady.Totals.PeakBytes) * 100
	require.Greater(t, increase, 10.0)
	want := fmt.Sprintf("FAIL  max-increase  peak %d bytes (%s), %+.2f%% over the baseline's %d bytes",
		spike.Totals.PeakBytes, formatMiB(spike.Totals.PeakBytes), increase, steady.Totals.PeakBytes)
	assert.Contains(t, r.stdout, want)
	allowed := steady.Totals.PeakBytes * 110 / 100
	assert.Contains(t, r.stdout, fmt.Sprintf("limit +10%%, at most %d bytes", allowed))
	assert.Contains(t, r.stdout, fmt.Sprintf("over by %d bytes", spike.Totals.PeakBytes-allowed))
	// The stack that grew: save_checkpoint, new, with its bytes at the peak.
	ckpt := spike.ByFunction["save_checkpoint"].LiveBytesAtPeak
	require.NotZero(t, ckpt)
	assert.Regexp(t, fmt.Sprintf(`stacks that grew at the peak \(vs baseline [^)]*\):\n  1\. \[new\] \+%d bytes [^\n]* at save_checkpoint \(`, ckpt), r.stdout)
	assert.Contains(t, r.stdout, "::error title=vramprof check%3A max-increase::peak ")

	doc := mustReadJUnit(t, junit)
	cases := failedCases(doc)
	assert.Equal(t, map[string]string{"command": "", "max-increase": cases["max-increase"]}, cases)
	assert.Contains(t, cases["max-increase"], fmt.Sprintf("%+.2f%%", increase))

	md, err := os.ReadFile(summary)
	require.NoError(t, err, "GITHUB_STEP_SUMMARY written")
	assert.Contains(t, string(md), "## vramprof check: FAIL: memory regression")
	assert.Contains(t, string(md), "| max-increase | **FAIL** |")
	assert.Contains(t, string(md), "save_checkpoint")

	// A limit's annotation names the site in the repository (file= and
	// line=, relative to the directory check runs in), so that it shows
	// in the pull request's diff: the function holding the most at the
	// peak by the truth, at one of its allocation calls.
	r = vramprof(t, execOpts{dir: probetest.Root(), env: []string{"GITHUB_ACTIONS=true"}}, "check", "--max-peak", "1", out)
	assert.Equal(t, exitCheckRegression, r.code, "stdout:\n%s", r.stdout)
	m := regexp.MustCompile(`(?m)^::error file=(testdata/scenarios/spike\.c),line=(\d+),title=vramprof check%3A max-peak::` +
		`peak \d+ bytes .*the most at the peak: (\d+) bytes .* at (\w+) \(`).FindStringSubmatch(r.stdout)
	if assert.NotNil(t, m, "a max-peak annotation with file= and line=:\n%s", r.stdout) {
		top := topPeakFunction(spike)
		assert.Equal(t, top, m[4], "the site holding the most at the peak")
		assert.Equal(t, strconv.FormatUint(spike.ByFunction[top].LiveBytesAtPeak, 10), m[3])
		src, err := os.ReadFile(filepath.Join(probetest.Root(), m[1]))
		require.NoError(t, err)
		n, _ := strconv.Atoi(m[2])
		lines := strings.Split(string(src), "\n")
		require.Less(t, n-1, len(lines))
		assert.Contains(t, lines[n-1], "TRUTH_MALLOC", "line %d of %s is an allocation call", n, m[1])
	}

	// A percentage just above the increase passes; just below fails. Judged
	// from the kept recording.
	above := fmt.Sprintf("%.2f", math.Ceil(increase*100)/100+0.01)
	below := fmt.Sprintf("%.2f", math.Floor(increase*100)/100-0.01)
	r = vramprof(t, execOpts{}, "check", "--baseline", base, "--max-increase", above, out)
	assert.Equal(t, 0, r.code, "--max-increase %s: stdout:\n%s", above, r.stdout)
	assert.Contains(t, r.stdout, "PASS  max-increase")
	r = vramprof(t, execOpts{}, "check", "--baseline", base, "--max-increase", below+"%", out)
	assert.Equal(t, exitCheckRegression, r.code, "--max-increase %s: stdout:\n%s", below, r.stdout)
	// A report.json serves as a baseline too.
	r = vramprof(t, execOpts{}, "check", "--baseline", filepath.Join(out, "report.json"), "--max-increase", "0", out)
	assert.Equal(t, 0, r.code, "stdout:\n%s", r.stdout)
}

// formatMiB is the human form the verdict prints beside the bytes.
func formatMiB(n uint64) string {
	return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
}

// TestCheckCommandFails: a command that fails on its own is not a memory
// regression (exit 2); one that fails and regressed is (exit 1, both said).
func TestCheckCommandFails(t *testing.T) {
	probetest.RequirePrivilege(t)
	t.Run("own_failure", func(t *testing.T) {
		junit := filepath.Join(t.TempDir(), "j.xml")
		r := vramprof(t, execOpts{dir: t.TempDir()}, "check", "--junit", junit, "--max-peak", "1GiB", "--", "sh", "-c", "exit 3")
		assert.Equal(t, exitToolError, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		assert.Contains(t, r.stdout, "vramprof check: ERROR: command failed with exit code 3 (not a memory regression: 1 memory check passed)")
		assert.Contains(t, r.stdout, "FAIL  command       exit code 3")
		assert.Contains(t, r.stdout, "PASS  max-peak      peak 0 bytes")
		lines := r.stderrLines()
		require.NotEmpty(t, lines)
		assert.Regexp(t, `^vramprof: check: command failed with exit code 3; no memory limit was exceeded`, lines[len(lines)-1])
		cases := failedCases(mustReadJUnit(t, junit))
		assert.Equal(t, "", cases["max-peak"])
		assert.Contains(t, cases["command"], "error: command failed with exit code 3")
	})
	t.Run("failure_and_regression", func(t *testing.T) {
		// oom exits 1 after its cudaMalloc fails; its peak is above 1 byte,
		// and running out of memory fails a check of its own
		// (TestCheckOOM).
		r, truth := checkScenario(t, "oom", []string{"FAKECUDA_CAPACITY=1073741824"}, "--max-peak", "1")
		assert.Equal(t, exitCheckRegression, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		assert.Contains(t, r.stdout, "vramprof check: FAIL: out of memory (2 of 2 checks failed), and the command failed with exit code 1")
		assert.Contains(t, r.stdout, fmt.Sprintf("FAIL  max-peak      peak %d bytes", truth.Totals.PeakBytes))
	})
}

// TestCheckBadInput: bad sizes and baselines are one-line errors, exit 2,
// before anything runs.
func TestCheckBadInput(t *testing.T) {
	tmp := t.TempDir()
	wrongSchema := filepath.Join(tmp, "wrong.json")
	require.NoError(t, os.WriteFile(wrongSchema, []byte(`{"schema": "vramprof/baseline/v9", "peak_bytes": 1}`), 0o644))
	noSchema := filepath.Join(tmp, "noschema.json")
	require.NoError(t, os.WriteFile(noSchema, []byte(`{"peak_bytes": 1}`), 0o644))
	corrupt := filepath.Join(tmp, "corrupt.json")
	require.NoError(t, os.WriteFile(corrupt, []byte(`{"schema": "vramprof/baseline/v1", "peak_bytes": `), 0o644))
	badLimits := filepath.Join(tmp, "bad.limits")
	require.NoError(t, os.WriteFile(badLimits, []byte("tests/test_x.py::test_a 1GiB\ntests/test_x.py::test_b 2 GiB\n"), 0o644))
	for _, tc := range []struct {
		name  string
		args  []string
		words []string
	}{
		{"size_space", []string{"check", "--max-peak", "12 GB", "--", "true"}, []string{`--max-peak "12 GB"`, "no spaces", "512MiB"}},
		{"size_fraction", []string{"check", "--max-peak", "1.5", "--", "true"}, []string{"whole number of bytes", "1.5GiB"}},
		{"size_negative", []string{"check", "--max-leak", "-3", "--", "true"}, []string{"--max-leak", "negative"}},
		{"size_empty", []string{"check", "--max-peak=", "--", "true"}, []string{"empty"}},
		{"size_overflow", []string{"check", "--max-peak", "99999999999999999999", "--", "true"}, []string{"too large"}},
		{"percent", []string{"check", "--baseline", wrongSchema, "--max-increase", "ten", "--", "true"}, []string{"--max-increase", "percentage"}},
		{"baseline_schema", []string{"check", "--baseline", wrongSchema, "--max-increase", "10", "--", "true"}, []string{"vramprof/baseline/v9", "vramprof/baseline/v1"}},
		{"baseline_no_schema", []string{"check", "--baseline", noSchema, "--max-increase", "10", "--", "true"}, []string{"no \"schema\""}},
		{"baseline_corrupt", []string{"check", "--baseline", corrupt, "--max-increase", "10", "--", "true"}, []string{"not valid JSON"}},
		{"baseline_missing", []string{"check", "--baseline", filepath.Join(tmp, "nope.json"), "--max-increase", "10", "--", "true"}, []string{"nope.json", "no such file"}},
		{"baseline_without_pct", []string{"check", "--baseline", wrongSchema, "--", "true"}, []string{"--max-increase"}},
		{"pct_without_baseline", []string{"check", "--max-increase", "10", "--", "true"}, []string{"--baseline"}},
		{"nothing_to_check", []string{"check", "--", "true"}, []string{"nothing to check"}},
		{"per_test_size", []string{"check", "--max-peak-per-test", "2 GiB", "--", "true"}, []string{`--max-peak-per-test "2 GiB"`, "no spaces"}},
		{"limits_missing", []string{"check", "--limits", filepath.Join(tmp, "none.limits"), "--", "true"}, []string{"--limits", "none.limits", "no such file"}},
		{"limits_bad_line", []string{"check", "--limits", badLimits, "--", "true"}, []string{"bad.limits:2", `"tests/test_x.py::test_b 2 GiB" is not a limit`, "tests/test_x.py::test_big 2GiB"}},
		{"no_command", []string{"check", "--max-peak", "1GiB", "--"}, []string{"no command"}},
		{"no_target", []string{"check", "--max-peak", "1GiB"}, []string{"INPUT"}},
		{"command_and_input", []string{"check", "--max-peak", "1GiB", "somedir", "--", "true"}, []string{"not both"}},
		{"input_missing", []string{"check", "--max-peak", "1GiB", filepath.Join(tmp, "nothing")}, []string{"nothing", "no such file"}},
		{"input_wrong_schema", []string{"check", "--max-peak", "1GiB", wrongSchema}, []string{"vramprof/baseline/v9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cwd := t.TempDir()
			r := vramprof(t, execOpts{dir: cwd}, tc.args...)
			assertToolError(t, r, tc.words...)
			assert.Empty(t, r.stdout)
			assertNoOutputs(t, "", cwd)
		})
	}
}
