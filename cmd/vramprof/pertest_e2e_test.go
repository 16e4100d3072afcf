//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report/units"
)

// pytestTruth is what testdata/python/pytest's tests write
// (gpubooks.py): each test's own books, by the node id pytest gives it.
type pytestTruth struct {
	Tests map[string]struct {
		PeakBytes   uint64 `json:"peak_bytes"`
		PeakLine    int    `json:"peak_line"`
		LeakedBytes uint64 `json:"leaked_bytes"`
		Allocations uint64 `json:"allocations"`
	} `json:"tests"`
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
// line of test_big that reached its peak. The recording, checked again
// from its directory, gives the same figures; its report.json, which holds
// none, no verdict.
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

	// Again from the recording: the same figures, read from its trace.
	again := vramprof(t, execOpts{dir: tmp}, "check", "--max-peak-per-test", "1GiB", out)
	assert.Equal(t, exitCheckPass, again.code, "stdout:\n%s\nstderr:\n%s", again.stdout, again.stderr)
	for id, tt := range truth.Tests {
		assert.Contains(t, again.stdout, fmt.Sprintf("PASS  %s: peak %s, leaked %s in ", id,
			units.BytesExact(tt.PeakBytes), units.BytesExact(tt.LeakedBytes)))
	}
	// report.json holds no per-test figures: no verdict.
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
