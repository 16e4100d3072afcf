//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report/units"
)

// pytestTruth is what testdata/python/pytest's tests write
// (gpubooks.py): each test's own books, by the node id pytest gives it.
type pytestTruth struct {
	Tests map[string]struct {
		PeakBytes      uint64 `json:"peak_bytes"`
		PeakLine       int    `json:"peak_line"`
		LeakedBytes    uint64 `json:"leaked_bytes"`
		Allocations    uint64 `json:"allocations"`
		AllocatedBytes uint64 `json:"allocated_bytes"`
	} `json:"tests"`
}

// reportTest is one entry of report.json's "tests".
type reportTest struct {
	NodeID         string `json:"node_id"`
	Basis          string `json:"basis"`
	Layer          string `json:"layer"`
	PeakBytes      uint64 `json:"peak_bytes"`
	PeakSite       string `json:"peak_site"`
	LeakedBytes    uint64 `json:"leaked_bytes"`
	Allocations    uint64 `json:"allocations"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	Limit          *struct {
		Bytes uint64 `json:"bytes"`
		From  string `json:"from"`
		Pass  bool   `json:"pass"`
	} `json:"limit"`
}

// reportTests is report.json's "tests" by node id; nil when it has none.
func reportTests(t *testing.T, data []byte) map[string]reportTest {
	t.Helper()
	var rep struct {
		Tests []reportTest `json:"tests"`
	}
	require.NoError(t, json.Unmarshal(data, &rep))
	if rep.Tests == nil {
		return nil
	}
	out := map[string]reportTest{}
	for _, tt := range rep.Tests {
		require.NotContains(t, out, tt.NodeID, "one entry per test")
		out[tt.NodeID] = tt
	}
	return out
}

// pytestPython is the system's CPython with pytest: Debian's python3-pytest
// installed (.ci/run does), or unpacked by testdata/python/pytest/fetch.sh
// (make test runs it) and put on PYTHONPATH, which env then holds. Without
// either, a skip (a failure under CI=true) saying how to get one.
func pytestPython(t *testing.T) (python string, env []string) {
	t.Helper()
	const py = "/usr/bin/python3"
	if exec.Command(py, "-c", "import pytest").Run() == nil {
		return py, nil
	}
	out, err := exec.Command(filepath.Join(probetest.Root(), "testdata", "python", "pytest", "fetch.sh")).Output()
	if dir := strings.TrimSpace(string(out)); err == nil && dir != "" {
		return py, []string{"PYTHONPATH=" + dir}
	}
	msg := fmt.Sprintf("%s cannot import pytest and testdata/python/pytest/fetch.sh failed (%v): apt-get install python3-pytest", py, err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return "", nil
}

// pytestProject is a temporary project with testdata/python/pytest's
// gpubooks.py and the test files named under tests/, and a pytest.ini at
// its top: pytest's rootdir, which the node ids' paths are relative to,
// and where check runs.
func pytestProject(t *testing.T, files ...string) string {
	t.Helper()
	tmp := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(tmp, "tests"), 0o755))
	for _, f := range append([]string{"gpubooks.py"}, files...) {
		src, err := os.ReadFile(filepath.Join(probetest.Root(), "testdata", "python", "pytest", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(tmp, "tests", f), src, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "pytest.ini"), []byte("[pytest]\n"), 0o644))
	return tmp
}

// TestCheckPerTest: `vramprof check --max-peak-per-test 64MiB --limits FILE
// -- python3 -m pytest` gives each test of test_gpu.py its own peak and
// leak, as the tests' own books say (the truth): each parameter set of
// test_param a test of its own, test_fixture's fixture (setup and
// teardown) in its figures, told apart by pytest's phases. It judges each
// against its limit (the limits file's 80 MiB for TestModel's tests and
// 2 MiB for test_param[3], 64 MiB for the rest), fails test_big and
// test_param[3] (exit 1), writes one JUnit testcase per test named by
// pytest's node id, with the basis in a suite property, and annotates the
// line of test_big that reached its peak. The recording's report.json
// (and report.md) carry the same figures with each limit's verdict, and
// `vramprof report` of its trace the same figures again. The recording,
// checked again from its directory, gives the same figures; its
// report.json, whose tests check does not judge again, no verdict.
func TestCheckPerTest(t *testing.T) {
	probetest.RequirePrivilege(t)
	python, pyEnv := pytestPython(t)
	tmp := pytestProject(t, "test_gpu.py")
	limits := filepath.Join(tmp, "gpu.limits")
	require.NoError(t, os.WriteFile(limits, []byte("# GPU memory per test\ntests/test_gpu.py::TestModel::* 80MiB\n"+
		"tests/test_gpu.py::test_param[3] 2MiB\n"), 0o644))
	truthPath, junit, out := filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "j.xml"), filepath.Join(tmp, "rec")
	env := []string{"VRAMPROF_TRUTH=" + truthPath, "FAKECUDA_LIB=" + probetest.Lib(t, "libcudart.so.12"),
		"PYTHONDONTWRITEBYTECODE=1", "GITHUB_ACTIONS=true", "GITHUB_WORKSPACE=" + tmp}
	env = append(env, pyEnv...)
	r := vramprof(t, execOpts{dir: tmp, env: env}, "check", "--max-peak-per-test", "64MiB", "--limits", limits,
		"--junit", junit, "-o", out, "--", python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/test_gpu.py")
	truth := mustReadJSON[pytestTruth](t, truthPath)

	// The truth's own arithmetic (the file's docstring): seven tests, one
	// leaking, test_big and test_param[3] above their limits.
	const big, param3 = "tests/test_gpu.py::TestModel::test_big", "tests/test_gpu.py::test_param[3]"
	require.Len(t, truth.Tests, 7, "test_small, test_leaks, TestModel::test_big, test_param[1], [2], [3], test_fixture")
	require.Contains(t, truth.Tests, big)
	require.Greater(t, truth.Tests[big].PeakBytes, uint64(80<<20), "truth: test_big is over the limits file's 80 MiB")
	require.Greater(t, truth.Tests[param3].PeakBytes, uint64(2<<20), "truth: test_param[3] is over the limits file's 2 MiB")
	require.Equal(t, uint64(6+2)<<20, truth.Tests["tests/test_gpu.py::test_fixture"].PeakBytes,
		"truth: test_fixture's peak holds its fixture's 6 MiB")
	leaking := 0
	for id, tt := range truth.Tests {
		if id != big && id != param3 {
			require.LessOrEqual(t, tt.PeakBytes, uint64(64<<20), "truth: %s within --max-peak-per-test", id)
		}
		if tt.LeakedBytes > 0 {
			leaking++
		}
	}
	require.Equal(t, 1, leaking, "truth: one test leaks")

	assert.Equal(t, exitCheckRegression, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "vramprof check: FAIL: memory regression (2 of 7 checks failed)")
	assert.Contains(t, r.stdout, "PASS  command       exit code 0", "the tests themselves passed")
	assert.Contains(t, r.stdout, "per pytest test (its own allocations at the segment layer; made while pytest ran it (PYTEST_CURRENT_TEST), "+
		"setup and teardown included;", "told apart by pytest's phases")
	for id, tt := range truth.Tests {
		limit := "67108864 bytes (64.00 MiB) (--max-peak-per-test)"
		switch {
		case strings.HasPrefix(id, "tests/test_gpu.py::TestModel::"):
			limit = fmt.Sprintf("83886080 bytes (80.00 MiB) (%s:2)", limits)
		case id == param3:
			limit = fmt.Sprintf("2097152 bytes (2.00 MiB) (%s:3)", limits)
		}
		verdict := "PASS"
		if id == big || id == param3 {
			verdict = "FAIL"
		}
		assert.Contains(t, r.stdout, fmt.Sprintf("%s  %s: peak %s, leaked %s in ", verdict, id,
			units.BytesExact(tt.PeakBytes), units.BytesExact(tt.LeakedBytes)), "%s's figures", id)
		assert.Contains(t, r.stdout, fmt.Sprintf("; limit %s; ", limit), id)
	}

	doc := mustReadJUnit(t, junit)
	cases := failedCases(doc)
	assert.Len(t, cases, 1+len(truth.Tests), "the command and one testcase per test: %v", cases)
	for id := range truth.Tests {
		require.Contains(t, cases, id, "a testcase named by the node id")
		if id != big && id != param3 {
			assert.Equal(t, "", cases[id], id)
		}
	}
	over := truth.Tests[big].PeakBytes - 80<<20
	assert.Equal(t, fmt.Sprintf("%s: its allocations peaked at %s, over its limit 83886080 bytes (80.00 MiB) (%s:2) by %s",
		big, units.BytesExact(truth.Tests[big].PeakBytes), limits, units.BytesExact(over)), cases[big])
	over = truth.Tests[param3].PeakBytes - 2<<20
	assert.Equal(t, fmt.Sprintf("%s: its allocations peaked at %s, over its limit 2097152 bytes (2.00 MiB) (%s:3) by %s",
		param3, units.BytesExact(truth.Tests[param3].PeakBytes), limits, units.BytesExact(over)), cases[param3])
	assert.Contains(t, doc.Suites[0].Properties, junitProperty{Name: "vramprof.pytest.basis", Value: "phases"},
		"the tests were told apart by pytest's phases")
	assert.Contains(t, r.stdout, fmt.Sprintf("::error file=tests/test_gpu.py,line=%d,title=vramprof check%%3A %s::%s",
		truth.Tests[big].PeakLine, strings.ReplaceAll(big, ":", "%3A"), big), "an annotation at the line that reached the peak")

	// report.json: each test's figures, the truth's, with the limit check
	// judged it against and the verdict.
	data, err := os.ReadFile(filepath.Join(out, "report.json"))
	require.NoError(t, err)
	inReport := reportTests(t, data)
	require.Len(t, inReport, len(truth.Tests), "one entry per test: %v", inReport)
	for id, want := range truth.Tests {
		got, ok := inReport[id]
		require.True(t, ok, "report.json names %s", id)
		assert.Equal(t, "phases", got.Basis, id)
		assert.Equal(t, "segment", got.Layer, id)
		assert.Equal(t, want.PeakBytes, got.PeakBytes, "%s peak", id)
		assert.Equal(t, want.LeakedBytes, got.LeakedBytes, "%s leak", id)
		assert.Equal(t, want.Allocations, got.Allocations, "%s allocations", id)
		assert.Equal(t, want.AllocatedBytes, got.AllocatedBytes, "%s allocated bytes", id)
		assert.True(t, strings.HasSuffix(got.PeakSite, fmt.Sprintf("tests/test_gpu.py:%d)", want.PeakLine)), "%s peak site %q", id, got.PeakSite)
		limit, from := uint64(64<<20), "--max-peak-per-test"
		switch {
		case strings.HasPrefix(id, "tests/test_gpu.py::TestModel::"):
			limit, from = 80<<20, limits+":2"
		case id == param3:
			limit, from = 2<<20, limits+":3"
		}
		if assert.NotNil(t, got.Limit, "%s's limit", id) {
			assert.Equal(t, limit, got.Limit.Bytes, id)
			assert.Equal(t, from, got.Limit.From, id)
			assert.Equal(t, want.PeakBytes <= limit, got.Limit.Pass, "%s's verdict", id)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), fmt.Sprintf("| tests/test\\_gpu.py::TestModel::test\\_big | %s | %s in 0 |",
		units.Bytes(truth.Tests[big].PeakBytes), units.Bytes(0)))
	assert.Contains(t, string(md), "| FAIL, limit 80.00 MiB ("+strings.ReplaceAll(limits, "_", "\\_")+":2) |")

	// `vramprof report` from the trace: the same figures, and no limit.
	fromTrace := vramprof(t, execOpts{dir: tmp}, "report", out, "--format", "json")
	require.Equal(t, 0, fromTrace.code, "stderr:\n%s", fromTrace.stderr)
	traced := reportTests(t, []byte(fromTrace.stdout))
	require.Len(t, traced, len(inReport))
	for id, got := range traced {
		assert.Nil(t, got.Limit, "%s: no check, no limit", id)
		got.Limit = inReport[id].Limit
		assert.Equal(t, inReport[id], got, id)
	}

	// Again from the recording: the same figures, read from its trace.
	again := vramprof(t, execOpts{dir: tmp}, "check", "--max-peak-per-test", "1GiB", out)
	assert.Equal(t, exitCheckPass, again.code, "stdout:\n%s\nstderr:\n%s", again.stdout, again.stderr)
	for id, tt := range truth.Tests {
		assert.Contains(t, again.stdout, fmt.Sprintf("PASS  %s: peak %s, leaked %s in ", id,
			units.BytesExact(tt.PeakBytes), units.BytesExact(tt.LeakedBytes)))
	}
	// check judges per-test limits on the trace only, not report.json's
	// tests: no verdict.
	rep := vramprof(t, execOpts{dir: tmp}, "check", "--max-peak-per-test", "1GiB", filepath.Join(out, "report.json"))
	assert.Equal(t, exitToolError, rep.code, "stdout:\n%s", rep.stdout)
	assert.Contains(t, rep.stdout, "vramprof check: UNKNOWN: per-test limits need the recording's trace")
}

// TestCheckPerTestBlocks: under a caching allocator (testdata's
// libc10_cuda.so, through ctypes) the per-test figures are the tensors'
// (the block layer), as test_pool.py's books count them: test_reuse's
// 4 MiB come from a segment test_blocks left cached, so only the blocks
// show that it needed them.
func TestCheckPerTestBlocks(t *testing.T) {
	probetest.RequirePrivilege(t)
	python, pyEnv := pytestPython(t)
	tmp := pytestProject(t, "test_pool.py")
	truthPath := filepath.Join(tmp, "truth.json")
	env := append([]string{"VRAMPROF_TRUTH=" + truthPath, "C10_LIB=" + probetest.Lib(t, "libc10_cuda.so"),
		"PYTHONDONTWRITEBYTECODE=1"}, pyEnv...)
	r := vramprof(t, execOpts{dir: tmp, env: env}, "check", "--max-peak-per-test", "1GiB",
		"--", python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/test_pool.py")
	truth := mustReadJSON[pytestTruth](t, truthPath)
	require.Len(t, truth.Tests, 2, "test_blocks, test_reuse")
	assert.Equal(t, exitCheckPass, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "per pytest test (its own allocations at the block layer;")
	for id, tt := range truth.Tests {
		require.Positive(t, tt.PeakBytes, "truth: %s allocated", id)
		assert.Contains(t, r.stdout, fmt.Sprintf("PASS  %s: peak %s, leaked %s in ", id,
			units.BytesExact(tt.PeakBytes), units.BytesExact(tt.LeakedBytes)), "%s's figures", id)
	}
}

// TestFlightPytestSegment: under `vramprof run --max-trace 64KiB`,
// test_flight.py's test_long[long] spans several segments (its fixture's A
// in setup, 3000 pairs of 4 KiB, then B), and the oldest are deleted. Only
// pytest's phases name it (a parameter set; A is its fixture's, in no test
// frame). The segment in which B is allocated began inside it: read alone
// (`vramprof report SEGMENT`), it names test_long[long] with the truth's
// peak (A, restored from its checkpoint, + B); the recording's
// report.json, from the segments kept (the oldest of which began inside
// it too), gives the truth's peak and leak.
func TestFlightPytestSegment(t *testing.T) {
	probetest.RequirePrivilege(t)
	python, pyEnv := pytestPython(t)
	tmp := pytestProject(t, "test_flight.py")
	truthPath, out := filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "rec")
	env := append([]string{"VRAMPROF_TRUTH=" + truthPath, "FAKECUDA_LIB=" + probetest.Lib(t, "libcudart.so.12"),
		"PYTHONDONTWRITEBYTECODE=1"}, pyEnv...)
	r := vramprof(t, execOpts{dir: tmp, env: env}, "run", "-q", "--max-trace", "64KiB", "-o", out,
		"--", python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/test_flight.py")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	truth := mustReadJSON[pytestTruth](t, truthPath)
	const id = "tests/test_flight.py::test_long[long]"
	require.Len(t, truth.Tests, 1)
	want := truth.Tests[id]
	require.Equal(t, uint64(4+2)<<20, want.PeakBytes, "truth: A + B")
	require.Equal(t, uint64(2)<<20, want.LeakedBytes, "truth: B")

	names, _, _ := segmentFiles(t, out)
	require.Greater(t, len(names), 1, "the trace rotated")
	require.NotEqual(t, "trace-000001.vpt", names[0], "the oldest segments were deleted")
	seg := segmentAllocating(t, out, names, 2<<20)
	require.NotEqual(t, "trace-000001.vpt", seg, "B's segment began after the first")

	// Read alone, a segment that another follows ends without the End
	// record (the run went on in the next one): its report covers every
	// record it holds and says it was cut short (exit 2); the last
	// segment holds the End record (exit 0).
	alone := vramprof(t, execOpts{dir: tmp}, "report", filepath.Join(out, seg), "--format", "json")
	if seg == names[len(names)-1] {
		require.Equal(t, 0, alone.code, "stderr:\n%s", alone.stderr)
	} else {
		require.Equal(t, 2, alone.code, "stderr:\n%s", alone.stderr)
		require.Contains(t, alone.stderr, seg+" ends after", "a segment another follows reads as cut at its end")
		require.Contains(t, alone.stderr, "it is a segment of a flight recording and ", "and says so")
	}
	tests := reportTests(t, []byte(alone.stdout))
	require.Contains(t, tests, id, "%s alone names the running test: %v", seg, tests)
	assert.Equal(t, "phases", tests[id].Basis)
	assert.Equal(t, want.PeakBytes, tests[id].PeakBytes, "%s alone: A, restored, + B", seg)

	data, err := os.ReadFile(filepath.Join(out, "report.json"))
	require.NoError(t, err)
	whole := reportTests(t, data)
	require.Len(t, whole, 1, "%v", whole)
	assert.Equal(t, "phases", whole[id].Basis)
	assert.Equal(t, want.PeakBytes, whole[id].PeakBytes, "the segments kept: peak")
	assert.Equal(t, want.LeakedBytes, whole[id].LeakedBytes, "the segments kept: leak")
}

// segmentAllocating names the segment of dir (among names) in which the
// allocation of size bytes was made, not restored from a checkpoint; the
// first when several were.
func segmentAllocating(t *testing.T, dir string, names []string, size uint64) string {
	t.Helper()
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
		require.NoError(t, err)
		r, err := event.NewReader(f)
		require.NoError(t, err)
		found := false
		for !found {
			rec, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			e, ok := rec.(*event.Event)
			found = ok && e.Kind == event.KindAlloc && e.Size == size && e.Flags&(event.FlagRestored|event.FlagNested) == 0
		}
		require.NoError(t, f.Close())
		if found {
			return name
		}
	}
	t.Fatalf("no segment of %s allocates %d bytes", dir, size)
	return ""
}
