package compare

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/report"
)

// oomReport is a report.json's figures with out-of-memory findings, as the
// analysis writes them: process 10 failed a 384 MiB cudaMalloc at
// grow (src/train.c:38) with 960 MiB live (3 failures, 1 GiB in all);
// process 20's caching allocator failed a 24 MiB segment for good
// (fragmentation) and once more after a retry that worked.
func oomReport() *report.JSON {
	const mib = 1 << 20
	live := []report.JSONStack{{Frames: []string{"cudaMalloc", "load (src/train.c:20)"}, Bytes: 960 * mib, Count: 5, Site: "load (src/train.c:20)"}}
	return &report.JSON{
		Run:    report.JSONRun{Complete: true, EndedCleanly: true},
		Totals: report.JSONTotals{PeakBytes: 960 * mib},
		Processes: []report.JSONProcess{
			{PID: 10, Command: "train", StartNs: 1},
			{PID: 20, Command: "pool", StartNs: 2},
		},
		Findings: []report.JSONFinding{
			{Kind: "peak", PID: 10, ProcessStartNs: 1, Bytes: 960 * mib},
			{Kind: "oom", Severity: "critical", PID: 10, ProcessStartNs: 1, Bytes: 384 * mib, TimeNs: 500,
				Summary: "a request for 402653184 bytes failed", Remediation: []string{"free memory before grow"},
				OOMCalls: &report.JSONOOMCalls{Count: 3, Bytes: 1 << 30, First: report.JSONFailure{
					JSONAllocation: report.JSONAllocation{TimeNs: 500, Size: 384 * mib, Device: "0", API: "cudaMalloc",
						Site: "grow (src/train.c:38)", Frames: []string{"cudaMalloc", "grow (src/train.c:38)", "0x7f01 (libc.so.6)"}},
					Error: "2 (cudaErrorMemoryAllocation)", LiveBytes: 960 * mib, DeviceLiveBytes: 900 * mib, LiveStacks: live}}},
			// A retry that worked: the program never saw it.
			{Kind: "oom", Severity: "medium", PID: 20, ProcessStartNs: 2, Bytes: 2 * mib, TimeNs: 700,
				OOM: &report.JSONOOM{RequestBytes: 2 * mib, Outcome: "retry_succeeded", Site: "warm (p.py:1)"}},
			{Kind: "oom", Severity: "critical", PID: 20, ProcessStartNs: 2, Bytes: 24 * mib, TimeNs: 800,
				Summary: "fragmentation OOM: the cache held 42 MiB free", Remediation: []string{"set expandable_segments:True"},
				OOM: &report.JSONOOM{RequestBytes: 24 * mib, Outcome: "final", Kind: "fragmentation", Device: "0", TimeNs: 800,
					Error: "2 (cudaErrorMemoryAllocation)", Site: "TestA.test_b (/repo/tests/test_a.py:7) -> alloc (/repo/tests/util.py:3)",
					State: report.JSONPoolState{ReservedBytes: 82 * mib, AllocatedBytes: 40 * mib, CachedFreeBytes: 42 * mib,
						LargestFreeRange: 4 * mib, FreeRanges: 11, Segments: 5}}},
		},
	}
}

// TestOOMFails: a recording that ran out of memory fails the gate (exit
// 1's verdict) with every limit held, and the text carries the forensics:
// each process's first failing request (bytes and site), what was live
// then, the verdict and the advice; a failure the allocator's retry
// survived is none.
func TestOOMFails(t *testing.T) {
	s := FromReport(oomReport(), "rec")
	require.Len(t, s.OOMs, 2, "one per process; the retried one is none")
	assert.Equal(t, uint64(384<<20), s.OOMs[0].RequestBytes)
	assert.Equal(t, uint64(3), s.OOMs[0].Count)
	assert.Equal(t, []string{"cudaMalloc", "grow (src/train.c:38)", "? (libc.so.6)"}, s.OOMs[0].Frames, "normalized")
	assert.Equal(t, uint64(1), s.OOMs[1].Count, "the retried failure is not counted")

	v := Judge(s, nil, Limits{MaxPeak: u64(1 << 40)}, intp(1))
	regression, err := v.Outcome()
	require.NoError(t, err)
	assert.True(t, regression, "an OOM is a memory failure: exit 1, not the command's own failure")
	assert.Equal(t, "FAIL: out of memory (1 of 2 checks failed), and the command failed with exit code 1", v.Header())
	text := textOf(v)
	for _, want := range []string{
		"FAIL  oom           4 requests ran out of memory in 2 processes; the first: 402653184 bytes (384.00 MiB) at grow (src/train.c:38); limit: none may run out of memory",
		"PASS  max-peak",
		"out of memory in process 10 (train):",
		"  failed:    402653184 bytes (384.00 MiB) cudaMalloc on device 0, error 2 (cudaErrorMemoryAllocation), at +500 ns",
		"  site:      grow (src/train.c:38)",
		"  in all:    3 requests ran out of memory, 1073741824 bytes (1.00 GiB) requested",
		"  live then: 1006632960 bytes (960.00 MiB) in the process, 943718400 bytes (900.00 MiB) on device 0",
		"  verdict:   a request for 402653184 bytes failed",
		"  advice:    free memory before grow",
		"    1. 1006632960 bytes (960.00 MiB), 100.0%, in 5 allocations at load (src/train.c:20)",
		"out of memory in process 20 (pool):",
		"  live then: 85983232 bytes (82.00 MiB) reserved in 5 segments, 41943040 bytes (40.00 MiB) allocated to tensors, 44040192 bytes (42.00 MiB) cached free in 11 ranges, the largest 4194304 bytes (4.00 MiB)",
		"  verdict:   fragmentation OOM: the cache held 42 MiB free",
	} {
		assert.Contains(t, text, want)
	}
	assert.Less(t, strings.Index(text, "process 10 (train)"), strings.Index(text, "process 20 (pool)"), "in time order")

	var junit bytes.Buffer
	require.NoError(t, v.WriteJUnit(&junit))
	assert.Contains(t, junit.String(), `<testcase name="oom" classname="vramprof.check"`)
	assert.Contains(t, junit.String(), `<failure message="out of memory: a request for 402653184 bytes (384.00 MiB) at grow (src/train.c:38) failed with error 2 (cudaErrorMemoryAllocation) on device 0 in process 10 while 1006632960 bytes (960.00 MiB) were live`)
	assert.Contains(t, junit.String(), `type="out of memory"><![CDATA[4 requests ran out of memory in 2 processes; the first: 402653184 bytes (384.00 MiB) at grow (src/train.c:38)
out of memory in process 10 (train):
  failed:    402653184 bytes (384.00 MiB) cudaMalloc on device 0`, "the forensics are the failure's body")

	// The command's check says why it failed.
	assert.Equal(t, "command failed with exit code 1 after running out of memory", v.Checks[0].Message)
}

// TestOOMIncompleteStaysUnknown: an OOM in a recording that cannot be
// trusted (cut short) gives no verdict, as any other figure.
func TestOOMIncompleteStaysUnknown(t *testing.T) {
	j := oomReport()
	j.Run.IncompleteReasons = []string{"cut short"}
	v := Judge(FromReport(j, "rec"), nil, Limits{MaxPeak: u64(1 << 40)}, nil)
	regression, err := v.Outcome()
	assert.False(t, regression)
	require.ErrorIs(t, err, ErrIncomplete)
	assert.True(t, strings.HasPrefix(v.Header(), "UNKNOWN: "), v.Header())
}

// TestNoOOMNoCheck: a recording that did not run out of memory has no oom
// check (the verdicts of before stand).
func TestNoOOMNoCheck(t *testing.T) {
	j := oomReport()
	j.Findings = j.Findings[:1]
	v := Judge(FromReport(j, "rec"), nil, Limits{MaxPeak: u64(1 << 40)}, nil)
	assert.Equal(t, "PASS (1 check)", v.Header())
}

// TestAnnotationsCarrySite: a failed check's ::error names its site's file
// relative to the source root, and its line, so GitHub shows it inline: an
// absolute path under the root (a Python frame) is made relative; a
// relative one (DWARF's, relative to the build directory) is found under
// the root by its path's end; a file outside the root, or one two files
// match, gets no file= (no wrong line).
func TestAnnotationsCarrySite(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"native/src/train.c", "tests/test_a.py", "a/dup.c", "b/dup.c"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, f), nil, 0o644))
	}
	j := oomReport()
	// The pool's site is a Python frame with its absolute co_filename.
	j.Findings[3].OOM.Site = "TestA.test_b (" + root + "/tests/test_a.py:7) -> alloc (" + root + "/tests/util.py:3)"
	s := FromReport(j, "rec")
	s.PeakStacks = []Stack{{Site: "fwd (dup.c:9)", Bytes: 5, Count: 1}}
	v := Judge(s, nil, Limits{MaxPeak: u64(1)}, nil)
	v.SourceRoot = root
	var b bytes.Buffer
	v.WriteAnnotations(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 3, b.String())
	assert.True(t, strings.HasPrefix(lines[0], "::error file=native/src/train.c,line=38,title=vramprof check%3A oom::out of memory: a request for 402653184 bytes"), lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "::error file=tests/test_a.py,line=7,title=vramprof check%3A oom::out of memory: a request for 25165824 bytes"), lines[1])
	assert.True(t, strings.HasPrefix(lines[2], "::error title=vramprof check%3A max-peak::peak 1006632960 bytes"), "dup.c is two files: no file=: %s", lines[2])

	v.SourceRoot = ""
	b.Reset()
	v.WriteAnnotations(&b)
	assert.NotContains(t, b.String(), "file=", "no root, no file")
}

func TestSiteLocation(t *testing.T) {
	for _, tc := range []struct {
		site, file string
		line       int
		ok         bool
	}{
		{"grow (scenarios/oom.c:38)", "scenarios/oom.c", 38, true},
		{"TestM.test_big (/t/test_gpu.py:108) -> Books.alloc (/t/test_gpu.py:56)", "/t/test_gpu.py", 108, true},
		{"c10::Fn::operator() (c10/fn.cpp:3)", "c10/fn.cpp", 3, true},
		{"0x7f12 (libc.so.6)", "", 0, false},
		{"grow", "", 0, false},
		{"grow (oom.c)", "", 0, false},
	} {
		file, line, ok := siteLocation(tc.site)
		assert.Equal(t, tc.ok, ok, tc.site)
		if tc.ok {
			assert.Equal(t, tc.file, file, tc.site)
			assert.Equal(t, tc.line, line, tc.site)
		}
	}
}
