//go:build linux

package main

// End-to-end tests of the vramprof binary: it is built once, then executed
// the way a user runs it, against the scenario programs of testdata/. Every
// expected figure comes from the truth a scenario writes about itself
// (VRAMPROF_TRUTH), or from arithmetic on it, never from vramprof's output.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	gprofile "github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// binPath is the vramprof binary built by TestMain.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vramprof-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "vramprof")
	if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// result is one finished execution of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// stderrLines is stderr split into its non-empty lines.
func (r result) stderrLines() []string {
	var out []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// execOpts say how to run the binary: extra environment, working directory.
type execOpts struct {
	env []string
	dir string
	bin string // the binary to run; the one built for the tests when ""
}

// vramprof runs the binary with args and waits for it (at most a minute).
func vramprof(tb testing.TB, o execOpts, args ...string) result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin := binPath
	if o.bin != "" {
		bin = o.bin
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), o.env...)
	cmd.Dir = o.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		var ee *exec.ExitError
		require.ErrorAs(tb, err, &ee, "vramprof %v: %s", args, r.stderr)
		r.code = ee.ExitCode()
	}
	return r
}

// Report is the part of report.json these tests read: the schema DESIGN.md
// promises, plus the additions named in report/json.go. Declared here, not
// taken from package report, so that a renamed field fails a test.
type Report struct {
	Schema string `json:"schema"`
	Totals struct {
		Allocations         *uint64 `json:"allocations"`
		Frees               *uint64 `json:"frees"`
		FailedAllocations   *uint64 `json:"failed_allocations"`
		UnknownFrees        *uint64 `json:"unknown_frees"`
		LostEvents          *uint64 `json:"lost_events"`
		AllocatedBytes      *uint64 `json:"allocated_bytes"`
		PeakBytes           *uint64 `json:"peak_bytes"`
		LiveBytesAtEnd      *uint64 `json:"live_bytes_at_end"`
		NullFrees           *uint64 `json:"null_frees"`
		ZeroSizeAllocations *uint64 `json:"zero_size_allocations"`
	} `json:"totals"`
	Processes []struct {
		PID             uint32        `json:"pid"`
		Command         string        `json:"command"`
		PeakBytes       uint64        `json:"peak_bytes"`
		LiveBytesAtEnd  uint64        `json:"live_bytes_at_end"`
		PeakStacks      []ReportStack `json:"peak_stacks"`
		LiveAtEndStacks []ReportStack `json:"live_at_end_stacks"`
	} `json:"processes"`
	Findings []struct {
		Kind     string        `json:"kind"`
		Severity string        `json:"severity"`
		Summary  string        `json:"summary"`
		Bytes    uint64        `json:"bytes"`
		Stacks   []ReportStack `json:"stacks"`
		Leak     *struct {
			GrowthBytes       uint64  `json:"growth_bytes"`
			WindowGrowthBytes uint64  `json:"window_growth_bytes"`
			ObservedNs        uint64  `json:"observed_ns"`
			RateBase          string  `json:"rate_base"`
			Iterations        uint64  `json:"iterations"`
			BytesPerIteration float64 `json:"bytes_per_iteration"`
			BytesPerMinute    float64 `json:"bytes_per_minute"`
		} `json:"leak"`
	} `json:"findings"`
	Run struct {
		Mode         string `json:"mode"`
		EndedCleanly bool   `json:"ended_cleanly"`
		EndReason    string `json:"end_reason"`
		ExitCode     int    `json:"exit_code"`
	} `json:"run"`
}

// ReportStack is a stack with the bytes it holds.
type ReportStack struct {
	Frames []string `json:"frames"`
	Bytes  uint64   `json:"bytes"`
	Site   string   `json:"site"`
}

func mustReadReport(tb testing.TB, path string) *Report {
	tb.Helper()
	return mustReadJSON[Report](tb, path)
}

// mustReadJSON reads a JSON file (a report, a truth) into a T.
func mustReadJSON[T any](tb testing.TB, path string) *T {
	tb.Helper()
	data, err := os.ReadFile(path)
	require.NoError(tb, err)
	var v T
	require.NoError(tb, json.Unmarshal(data, &v), "parse %s", path)
	return &v
}

// val dereferences a totals field, failing when report.json lacks it.
func val(tb testing.TB, name string, p *uint64) uint64 {
	tb.Helper()
	if p == nil {
		tb.Errorf("report.json totals lacks %q", name)
		return 0
	}
	return *p
}

// frameFunction is the function of a frame "function (file:line)".
func frameFunction(frame string) string {
	if i := strings.Index(frame, " ("); i >= 0 {
		return frame[:i]
	}
	return frame
}

// inRuntime tells a frame of the CUDA runtime (shared or linked in) from the
// program's own.
func inRuntime(frame string) bool {
	fn := frameFunction(frame)
	return strings.HasPrefix(fn, "cuda") || strings.HasPrefix(fn, "cu") && len(fn) > 2 && fn[2] >= 'A' && fn[2] <= 'Z' ||
		strings.Contains(frame, "(cuda/") || strings.Contains(frame, "libcudart")
}

// attribute is the function a stack is charged to: its first frame outside
// the CUDA runtime. Anonymous frames ("0x55d0... (driver_only)": a runtime
// linked in and stripped) are skipped: no scenario function is anonymous.
func attribute(frames []string) string {
	for _, f := range frames {
		if !inRuntime(f) && !strings.HasPrefix(f, "0x") {
			return frameFunction(f)
		}
	}
	return "<runtime only>"
}

// byFunction sums stacks' bytes by the function they are attributed to,
// leaving out zeros.
func byFunction(stacks []ReportStack) map[string]uint64 {
	out := map[string]uint64{}
	for _, s := range stacks {
		if s.Bytes > 0 {
			out[attribute(s.Frames)] += s.Bytes
		}
	}
	return out
}

// outputFiles is what an output directory holds, and nothing else.
var outputFiles = []string{"profile.pb.gz", "report.html", "report.json", "report.md", "trace.vpt"}

func assertDirHolds(tb testing.TB, dir string, want []string) {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(tb, err)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	sort.Strings(got)
	assert.Equal(tb, want, got, "contents of %s", dir)
}

// runScenario profiles a scenario with `vramprof run -o DIR` and returns DIR,
// the truth and the exit code.
func runScenario(t *testing.T, name string, env ...string) (string, *probetest.Truth, result) {
	t.Helper()
	bin := probetest.Bin(t, name)
	tmp := t.TempDir()
	truthPath := filepath.Join(tmp, "truth.json")
	dir := filepath.Join(tmp, "out")
	r := vramprof(t, execOpts{env: append(env, "VRAMPROF_TRUTH="+truthPath), dir: tmp}, "run", "-o", dir, "--", bin)
	return dir, probetest.MustReadTruth(t, truthPath), r
}

var scenarios = []struct {
	name string
	env  []string
	exit int
}{
	{name: "steady"},
	{name: "leak"},
	{name: "spike"},
	{name: "oom", env: []string{"FAKECUDA_CAPACITY=1073741824"}, exit: 1},
	{name: "threads"},
	{name: "dlopen_runtime"},
	{name: "static_runtime"},
	{name: "hashed"},
	{name: "static_lib"},
	// A C++ runtime whose cudaMalloc throws std::bad_alloc; the program
	// catches it and exits 3 (TestRunCxxThrow).
	{name: "cxx_throw", exit: 3},
}

// TestRunMatchesTruth profiles every scenario with `vramprof run` and checks
// report.json, the pprof profile and a replay of the trace against what the
// scenario says it did.
func TestRunMatchesTruth(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range scenarios {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, truth, r := runScenario(t, tc.name, tc.env...)
			require.Equal(t, tc.exit, r.code, "exit code; stderr:\n%s", r.stderr)
			want := outputFiles
			if truth.Totals.FailedAllocations > 0 {
				want = withMoments(want) // an out-of-memory moment report
			}
			assertDirHolds(t, dir, want)

			rep := mustReadReport(t, filepath.Join(dir, "report.json"))
			t.Run("report", func(t *testing.T) { checkReport(t, rep, truth) })
			t.Run("pprof", func(t *testing.T) { checkProfile(t, tc.name, filepath.Join(dir, "profile.pb.gz"), truth) })
			t.Run("replay", func(t *testing.T) {
				// The replay's figures against the program's truth, not only
				// against the live outputs (themselves made from the trace).
				replayed := mustReadReport(t, filepath.Join(checkReplay(t, dir), "report.json"))
				checkReport(t, replayed, truth)
			})
			t.Run("findings", func(t *testing.T) { checkFindings(t, tc.name, rep, truth) })
		})
	}
}

func checkReport(t *testing.T, rep *Report, truth *probetest.Truth) {
	assert.Equal(t, "vramprof/report/v1", rep.Schema)
	tt, want := rep.Totals, truth.Totals
	assert.Equal(t, want.Allocations, val(t, "allocations", tt.Allocations), "allocations")
	assert.Equal(t, want.Frees, val(t, "frees", tt.Frees), "frees")
	assert.Equal(t, want.FailedAllocations, val(t, "failed_allocations", tt.FailedAllocations), "failed_allocations")
	assert.Equal(t, want.UnknownFrees, val(t, "unknown_frees", tt.UnknownFrees), "unknown_frees")
	assert.Zero(t, want.UnknownFrees, "truth: run mode sees every allocation")
	assert.Equal(t, want.AllocatedBytes, val(t, "allocated_bytes", tt.AllocatedBytes), "allocated_bytes")
	assert.Equal(t, want.PeakBytes, val(t, "peak_bytes", tt.PeakBytes), "peak_bytes")
	assert.Equal(t, want.LiveBytesAtEnd, val(t, "live_bytes_at_end", tt.LiveBytesAtEnd), "live_bytes_at_end")
	assert.Zero(t, val(t, "lost_events", tt.LostEvents), "lost_events")
	assert.Equal(t, want.NullFrees, val(t, "null_frees", tt.NullFrees), "null_frees")
	assert.Equal(t, want.ZeroSizeAllocations, val(t, "zero_size_allocations", tt.ZeroSizeAllocations), "zero_size_allocations")

	// Per function: the stacks live at the end and at the peak, charged to
	// their first frame outside the runtime, hold exactly what the scenario
	// says each function held.
	wantEnd, wantPeak := map[string]uint64{}, map[string]uint64{}
	for fn, f := range truth.ByFunction {
		if f.LiveBytesAtEnd > 0 {
			wantEnd[fn] = f.LiveBytesAtEnd
		}
		if f.LiveBytesAtPeak > 0 {
			wantPeak[fn] = f.LiveBytesAtPeak
		}
	}
	gotEnd, gotPeak := map[string]uint64{}, map[string]uint64{}
	require.Len(t, rep.Processes, 1, "one traced process")
	for _, p := range rep.Processes {
		for fn, b := range byFunction(p.LiveAtEndStacks) {
			gotEnd[fn] += b
		}
		for fn, b := range byFunction(p.PeakStacks) {
			gotPeak[fn] += b
		}
		assert.Equal(t, want.PeakBytes, p.PeakBytes, "process peak_bytes")
		assert.Equal(t, want.LiveBytesAtEnd, p.LiveBytesAtEnd, "process live_bytes_at_end")
		assert.Equal(t, truth.PID, p.PID, "process pid")
	}
	assert.Equal(t, wantEnd, gotEnd, "live bytes at end by function")
	assert.Equal(t, wantPeak, gotPeak, "live bytes at the peak by function")
}

// sampleTypes are the profile's sample types, in DESIGN.md's order.
var sampleTypes = []string{
	"alloc_objects/count", "alloc_space/bytes", "inuse_objects/count",
	"inuse_space/bytes", "peak_objects/count", "peak_space/bytes",
}

func checkProfile(t *testing.T, name, path string, truth *probetest.Truth) {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	p, err := gprofile.Parse(f)
	require.NoError(t, err)
	require.NoError(t, p.CheckValid())

	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	require.Equal(t, sampleTypes, types, "sample types")
	assert.Equal(t, "peak_space", p.DefaultSampleType)

	// Device memory only: pinned host samples (space=host) are another
	// space, with their own peak (profile/doc.go).
	sums := make([]int64, len(p.SampleType))
	for _, s := range p.Sample {
		if sp := s.Label["space"]; len(sp) == 1 && sp[0] == "host" {
			continue
		}
		for i, v := range s.Value {
			sums[i] += v
		}
	}
	assert.EqualValues(t, truth.Totals.Allocations, sums[0], "alloc_objects")
	assert.EqualValues(t, truth.Totals.AllocatedBytes, sums[1], "alloc_space")
	assert.EqualValues(t, truth.Totals.LiveBytesAtEnd, sums[3], "inuse_space")
	assert.EqualValues(t, truth.Totals.PeakBytes, sums[5], "peak_space")

	// The function that held the most at the peak tops peak_space.
	var top string
	var topBytes uint64
	for fn, f := range truth.ByFunction {
		if f.LiveBytesAtPeak > topBytes {
			top, topBytes = fn, f.LiveBytesAtPeak
		}
	}
	require.NotEmpty(t, top)
	// Stacks start at their site (profile/doc.go): the function flat at
	// the top is the scenario's, with no -hide, even where the runtime is
	// linked in and stripped (driver_only: anonymous frames above
	// hidden_alloc).
	assert.Equal(t, top, pprofTop(t, path, "peak_space"), "top of peak_space")

	// What testdata/README.md says each scenario is about.
	switch name {
	case "leak":
		assert.Equal(t, "cache_activations", pprofTop(t, path, "inuse_space"), "top of inuse_space")
	case "spike":
		assert.Equal(t, "save_checkpoint", top, "truth: the spike's peak is in save_checkpoint")
	}
}

// pprofTop runs `go tool pprof -top` on path and returns its first entry,
// device memory only. Nothing is hidden: the runtime's frames are not in
// the profile's stacks.
func pprofTop(t *testing.T, path, index string) string {
	t.Helper()
	out, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index="+index, "-tagignore=space=host", path).CombinedOutput()
	require.NoError(t, err, "go tool pprof: %s", out)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 5 && f[0] == "flat" && f[4] == "cum%" {
			require.True(t, sc.Scan(), "pprof -top has no entries:\n%s", out)
			f := strings.Fields(sc.Text())
			require.Len(t, f, 6, "pprof -top entry %q", sc.Text())
			return f[5]
		}
	}
	t.Fatalf("no table in pprof -top output:\n%s", out)
	return ""
}

// checkReplay re-analyses the recorded trace without probes: the outputs
// must be byte-identical to the live run's.
func checkReplay(t *testing.T, dir string) (replayDir string) {
	dir2 := filepath.Join(t.TempDir(), "replay")
	r := vramprof(t, execOpts{}, "report", filepath.Join(dir, "trace.vpt"), "-o", dir2)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	for _, name := range []string{"profile.pb.gz", "report.html", "report.json", "report.md"} {
		live, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		replay, err := os.ReadFile(filepath.Join(dir2, name))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(live, replay), "%s differs between the live run and the replay", name)
	}
	assertDirHolds(t, dir2, []string{"profile.pb.gz", "report.html", "report.json", "report.md"})

	// A directory is an input too, and --format json prints report.json.
	r = vramprof(t, execOpts{}, "report", dir, "--format", "json")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	want, err := os.ReadFile(filepath.Join(dir, "report.json"))
	require.NoError(t, err)
	assert.Equal(t, string(want), r.stdout, "report DIR --format json")

	r = vramprof(t, execOpts{}, "report", dir)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.NotEmpty(t, r.stdout, "text summary")
	return dir2
}

func checkFindings(t *testing.T, name string, rep *Report, truth *probetest.Truth) {
	leakAt := func(fn string) bool {
		for _, f := range rep.Findings {
			if f.Kind != "leak" {
				continue
			}
			for _, s := range f.Stacks {
				if frameFunction(s.Site) == fn {
					return true
				}
			}
		}
		return false
	}
	var kinds []string
	for _, f := range rep.Findings {
		kinds = append(kinds, f.Kind)
	}
	switch name {
	case "leak":
		assert.True(t, leakAt("cache_activations"), "a leak finding at cache_activations; findings: %v", kinds)
		// cache_activations (scenarios/leak.c) is what leaks; the trainer's
		// functions free all they allocate.
		for _, f := range rep.Findings {
			if f.Kind == "leak" {
				for _, s := range f.Stacks {
					assert.Equal(t, "cache_activations", frameFunction(s.Site), "leak site")
				}
				// scenarios/leak.c runs ITERATIONS = 100 iterations, and
				// cache_activations keeps what the truth says it had live at
				// the end: the rate is that over 100, within 1 %.
				// The finding's bytes are the growth over the run: what
				// cache_activations allocated and still held at the end
				// (the truth's 125132800 = sum over i<100 of 1 MiB + 4096
				// i), none of it live at the start of a run; the windows
				// saw less, the first window already holding some.
				kept := truth.ByFunction["cache_activations"].LiveBytesAtEnd
				assert.Equal(t, uint64(125132800), kept, "truth: leak.c's arithmetic")
				assert.Equal(t, kept, f.Bytes, "leak bytes = growth over the run")
				if assert.NotNil(t, f.Leak, "leak evidence") {
					assert.Equal(t, kept, f.Leak.GrowthBytes, "growth_bytes")
					assert.Less(t, f.Leak.WindowGrowthBytes, kept, "window growth is evidence, less than the growth over the run")
					assert.Equal(t, uint64(100), f.Leak.Iterations, "iterations detected")
					want := float64(kept) / 100
					assert.InEpsilon(t, want, f.Leak.BytesPerIteration, 0.01, "bytes per iteration")
					assert.Greater(t, f.Leak.BytesPerMinute, 0.0, "bytes per minute (exact, in the json)")
					// 100 iterations take well under a second here: no
					// rate per unit of time in the texts, per iteration only.
					if f.Leak.ObservedNs < 1e9 {
						assert.Empty(t, f.Leak.RateBase, "no time base under 1 s observed")
						assert.NotContains(t, f.Summary, "per minute")
						assert.NotContains(t, f.Summary, "per second")
					}
					assert.Contains(t, f.Summary, "1251328 bytes (1.19 MiB) per iteration over 100 iterations of ")
				}
			}
		}
	case "steady":
		assert.NotContains(t, kinds, "leak", "steady frees everything")
		assert.NotContains(t, kinds, "spike", "steady has no spike")
	case "spike":
		// save_checkpoint's 512 MiB, allocated and freed at once, is what
		// was live of it at the peak (the truth's live_bytes_at_peak).
		var spikes []string
		for _, f := range rep.Findings {
			if f.Kind == "spike" {
				require.NotEmpty(t, f.Stacks)
				spikes = append(spikes, frameFunction(f.Stacks[0].Site))
				assert.Equal(t, truth.ByFunction["save_checkpoint"].LiveBytesAtPeak, f.Bytes, "spike height")
			}
		}
		assert.Equal(t, []string{"save_checkpoint"}, spikes, "spike findings")
	case "oom":
		var failed []uint64
		for _, c := range truth.Calls {
			if c.API == "cudaMalloc" && c.Outcome == "failed" {
				failed = append(failed, c.Size)
			}
		}
		require.Len(t, failed, 1, "truth: one failed request")
		var oom []uint64
		for _, f := range rep.Findings {
			if f.Kind == "oom" {
				oom = append(oom, f.Bytes)
			}
		}
		assert.Equal(t, failed, oom, "oom findings' bytes")
	}
}

// TestRunDefaultDir runs without -o: the outputs go to
// ./vramprof-<child pid>-<time>, and nothing else is left in the working
// directory.
func TestRunDefaultDir(t *testing.T) {
	probetest.RequirePrivilege(t)
	t.Parallel()
	cwd := t.TempDir()
	truthPath := filepath.Join(t.TempDir(), "truth.json")
	r := vramprof(t, execOpts{dir: cwd, env: []string{"VRAMPROF_TRUTH=" + truthPath}}, "run", "--", probetest.Bin(t, "hashed"))
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	truth := probetest.MustReadTruth(t, truthPath)
	ents, err := os.ReadDir(cwd)
	require.NoError(t, err)
	require.Len(t, ents, 1, "one output directory")
	assert.True(t, strings.HasPrefix(ents[0].Name(), fmt.Sprintf("vramprof-%d-", truth.PID)), "name %q", ents[0].Name())
	dir := filepath.Join(cwd, ents[0].Name())
	assertDirHolds(t, dir, outputFiles)
	rep := mustReadReport(t, filepath.Join(dir, "report.json"))
	assert.Equal(t, truth.Totals.Allocations, val(t, "allocations", rep.Totals.Allocations))

	// run.tool is "vramprof <version>" (probes/event Header.Tool).
	var raw struct {
		Run struct {
			Tool string `json:"tool"`
		} `json:"run"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &raw))
	assert.True(t, strings.HasPrefix(raw.Run.Tool, "vramprof"), "run.tool = %q", raw.Run.Tool)
}
