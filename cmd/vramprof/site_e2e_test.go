//go:build linux

package main

// End-to-end tests of the site rule (issue 11, analysis/doc.go "Sites"):
// the one name a finding shows is the place to fix, in every output.

import (
	"bufio"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	gprofile "github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// mdText is a site as report.md writes it (report/markdown.go's escaper).
var mdText = strings.NewReplacer(`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`,
	"#", `\#`, "|", `\|`, "<", "&lt;", ">", "&gt;").Replace

// sourceLine returns the line of the first occurrence of call inside the
// body of function fn in a C source: where fn calls it.
func sourceLine(tb testing.TB, path, fn, call string) int {
	tb.Helper()
	f, err := os.Open(path)
	require.NoError(tb, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	def := regexp.MustCompile(`^NOINLINE [^(]*\b` + regexp.QuoteMeta(fn) + `\(`)
	in := false
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case def.MatchString(l):
			in = true
		case in && l == "}":
			in = false
		case in && strings.Contains(l, call):
			return n
		}
	}
	tb.Fatalf("%s: no call of %q in %s", path, call, fn)
	return 0
}

// TestSiteSharedHelper runs testdata/scenarios/wrapper.c, whose every
// allocation goes through dev_alloc: the weights, the checkpoint spike and
// the leak must each be named by the caller that tells it apart
// ("log_metrics (wrapper.c:N) -> dev_alloc (wrapper.c:M)"), never by
// dev_alloc alone, in report.json, report.md, report.html, the text
// summary, check's evidence and pprof's -top.
func TestSiteSharedHelper(t *testing.T) {
	probetest.RequirePrivilege(t)
	t.Parallel()
	dir, truth, r := runScenario(t, "wrapper")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)

	// The truth charges each call to dev_alloc's caller. The leak: the one
	// function with bytes live at the end; the peak: the most live at the
	// peak; the spike: the largest single allocation.
	var leakFn, peakFn, spikeFn string
	var peakBytes, spikeSize uint64
	for fn, f := range truth.ByFunction {
		if f.LiveBytesAtEnd > 0 {
			require.Empty(t, leakFn, "truth: one function keeps memory to the end")
			leakFn = fn
		}
		if f.LiveBytesAtPeak > peakBytes {
			peakFn, peakBytes = fn, f.LiveBytesAtPeak
		}
	}
	for _, c := range truth.Calls {
		if c.API == "cudaMalloc" && c.Size > spikeSize {
			spikeFn, spikeSize = c.Func, c.Size
		}
	}
	require.Equal(t, []string{"log_metrics", "load_weights", "save_checkpoint"}, []string{leakFn, peakFn, spikeFn},
		"truth: what scenarios/wrapper.c says it does")
	_, present := truth.ByFunction["dev_alloc"]
	require.False(t, present, "truth: dev_alloc never charges itself")

	// The expected sites: each caller's line calling dev_alloc, and
	// dev_alloc's line calling cudaMalloc, from the program's source.
	src := filepath.Join(probetest.Root(), "testdata", "scenarios", "wrapper.c")
	helper := fmt.Sprintf("dev_alloc (scenarios/wrapper.c:%d)", sourceLine(t, src, "dev_alloc", "cudaMalloc("))
	site := func(fn string) string {
		return fmt.Sprintf("%s (scenarios/wrapper.c:%d) -> %s", fn, sourceLine(t, src, fn, "dev_alloc("), helper)
	}
	leakSite, peakSite, spikeSite := site(leakFn), site(peakFn), site(spikeFn)

	rep := mustReadReport(t, filepath.Join(dir, "report.json"))
	sites := map[string][]string{}
	for _, f := range rep.Findings {
		require.NotEmpty(t, f.Stacks, "%s finding", f.Kind)
		sites[f.Kind] = append(sites[f.Kind], f.Stacks[0].Site)
		for _, s := range f.Stacks {
			assert.NotEqual(t, helper, s.Site, "%s finding: the shared helper alone is no site", f.Kind)
		}
	}
	assert.Equal(t, []string{leakSite}, sites["leak"], "report.json: the leak's site")
	assert.Equal(t, []string{spikeSite}, sites["spike"], "report.json: the spike's site")
	assert.Equal(t, []string{peakSite}, sites["peak"], "report.json: the peak's largest stack")
	require.Len(t, rep.Processes, 1)
	require.NotEmpty(t, rep.Processes[0].LiveAtEndStacks)
	assert.Equal(t, leakSite, rep.Processes[0].LiveAtEndStacks[0].Site, "report.json: live at the end")

	mdBytes, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	htmlBytes, err := os.ReadFile(filepath.Join(dir, "report.html"))
	require.NoError(t, err)
	summary := vramprof(t, execOpts{}, "report", dir)
	require.Equal(t, 0, summary.code, "stderr: %s", summary.stderr)
	for _, s := range []string{leakSite, peakSite, spikeSite} {
		assert.Contains(t, string(mdBytes), mdText(s), "report.md")
		assert.Contains(t, string(htmlBytes), html.EscapeString(s), "report.html")
	}
	assert.Contains(t, summary.stdout, "at "+leakSite, "summary: the leak")
	assert.Contains(t, summary.stdout, "at "+peakSite, "summary: the top stack at the peak")

	// check's evidence: the failing gates name the same sites.
	ck := vramprof(t, execOpts{}, "check", "--max-peak", "1GiB", "--max-leak", "10MiB", dir)
	require.Equal(t, 1, ck.code, "check fails both gates; stdout:\n%s\nstderr:\n%s", ck.stdout, ck.stderr)
	assert.Contains(t, ck.stdout, "in 6 allocations at "+peakSite, "check: top stack at the peak")
	assert.Contains(t, ck.stdout, "at "+leakSite, "check: top stack live at the end")
	assert.Contains(t, ck.stdout, "leak finding: device memory allocated at "+leakSite, "check: the leak finding")

	// pprof: the flat column names the caller without -hide or -cum; the
	// CUDA call is the api label, the helper the helper label.
	path := filepath.Join(dir, "profile.pb.gz")
	for index, want := range map[string]string{"peak_space": peakFn, "inuse_space": leakFn, "alloc_space": spikeFn} {
		assert.Equal(t, want, pprofFlatTop(t, path, index), "pprof -top -sample_index=%s", index)
	}
	p := mustParseProfile(t, path)
	for _, s := range p.Sample {
		assert.Equal(t, []string{"cudaMalloc"}, s.Label["api"])
		assert.Equal(t, []string{"dev_alloc"}, s.Label["helper"])
	}
}

// pprofFlatTop runs plain `go tool pprof -top` (no -hide, no -cum) and
// returns the function of its first row.
func pprofFlatTop(t *testing.T, path, index string) string {
	t.Helper()
	out, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index="+index, path).CombinedOutput()
	require.NoError(t, err, "go tool pprof: %s", out)
	lines := strings.Split(string(out), "\n")
	for i, l := range lines {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "flat" && i+1 < len(lines) {
			row := strings.Fields(lines[i+1])
			require.Len(t, row, 6, "pprof -top row %q", lines[i+1])
			return row[5]
		}
	}
	t.Fatalf("no table in pprof -top output:\n%s", out)
	return ""
}

func mustParseProfile(tb testing.TB, path string) *gprofile.Profile {
	tb.Helper()
	f, err := os.Open(path)
	require.NoError(tb, err)
	defer f.Close()
	p, err := gprofile.Parse(f)
	require.NoError(tb, err)
	require.NoError(tb, p.CheckValid())
	return p
}

// pySiteTruth is what testdata/python/site/model.py writes: each
// cudaMalloc with the Python function, file and line that made it.
type pySiteTruth struct {
	PID     uint32 `json:"pid"`
	Version []int  `json:"version"`
	Calls   []struct {
		Function string `json:"function"`
		File     string `json:"file"`
		Line     int64  `json:"line"`
		Size     uint64 `json:"size"`
	} `json:"calls"`
	PeakBytes  uint64            `json:"peak_bytes"`
	LiveAtPeak map[string]uint64 `json:"live_at_peak"`
	LiveAtEnd  map[string]uint64 `json:"live_at_end"`
}

// TestSitePythonCtypes runs a Python model that calls cudaMalloc through
// ctypes: between its Python frames and the runtime are libffi (often an
// unnamed address: the site used to be "0x7f... (libffi.so.8.1.2)"),
// _ctypes and the eval loop. Every site must be the Python function and
// line that made the call, as the script read them from its own frames;
// in pprof the flat bytes are on those functions and the module frame keeps
// a name ("model.<module>", not "<unknown>").
func TestSitePythonCtypes(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, py := range probetest.Pythons(t) {
		t.Run(py.Name, func(t *testing.T) { testSitePythonCtypes(t, py) })
	}
}

func testSitePythonCtypes(t *testing.T, py probetest.Python) {
	tmp := t.TempDir()
	truthPath := filepath.Join(tmp, "truth.json")
	dir := filepath.Join(tmp, "out")
	script := filepath.Join(probetest.Root(), "testdata", "python", "site", "model.py")
	args := append([]string{"run", "-o", dir, "--"}, py.Argv...)
	r := vramprof(t, execOpts{dir: tmp, env: []string{
		"VRAMPROF_TRUTH=" + truthPath,
		"FAKECUDA_LIB=" + probetest.Lib(t, "libcudart.so.12"),
	}}, append(args, script)...)
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	truth := mustReadJSON[pySiteTruth](t, truthPath)
	require.NotEmpty(t, truth.Calls)
	if v := truth.Version; v[0] != 3 || v[1] < 10 || v[1] > 14 {
		t.Skipf("CPython %d.%d: native stacks only", v[0], v[1])
	}

	// The sites the script's own frames name, by function.
	want := map[string]string{}
	for _, c := range truth.Calls {
		want[c.Function] = pythonFrame(c.Function, c.File, c.Line)
	}
	require.Contains(t, want, "<module>", "truth: an allocation at module level")
	leakFn := ""
	for fn, b := range truth.LiveAtEnd {
		if b > 0 && fn != "load_weights" && fn != "<module>" {
			leakFn = fn
		}
	}
	require.Equal(t, "cache_embeddings", leakFn, "truth: the growing cache")
	var peakFn string
	for fn, b := range truth.LiveAtPeak {
		if b > truth.LiveAtPeak[peakFn] {
			peakFn = fn
		}
	}

	rep := mustReadReport(t, filepath.Join(dir, "report.json"))
	// A wrapper script's shell and its dirname are processes too.
	var peakStacks []ReportStack
	for _, p := range rep.Processes {
		if p.PID == truth.PID {
			peakStacks = p.PeakStacks
		}
	}
	require.NotEmpty(t, peakStacks, "the interpreter's process, pid %d", truth.PID)
	var sites []string
	for _, s := range peakStacks {
		sites = append(sites, s.Site)
		assert.NotContains(t, s.Site, "0x", "no address as a site")
		assert.NotContains(t, s.Site, "libffi", "no FFI glue as a site")
		assert.Equal(t, want[frameFunction(s.Site)], s.Site, "the Python frame that made the call")
	}
	assert.ElementsMatch(t, []string{want["load_weights"], want["cache_embeddings"], want["<module>"]}, sites, "sites at the peak")
	var leak []string
	for _, f := range rep.Findings {
		for _, s := range f.Stacks {
			assert.NotContains(t, s.Site, "libffi", "%s finding", f.Kind)
		}
		if f.Kind == "leak" {
			leak = append(leak, f.Stacks[0].Site)
		}
		if f.Kind == "peak" {
			assert.Equal(t, want[peakFn], f.Stacks[0].Site, "the peak's largest stack")
		}
	}
	assert.Equal(t, []string{want[leakFn]}, leak, "the leak's site")
	summary := vramprof(t, execOpts{}, "report", dir)
	require.Equal(t, 0, summary.code)
	assert.Contains(t, summary.stdout, "at "+want[leakFn])
	assert.NotContains(t, summary.stdout, "libffi")

	// pprof: the flat bytes by peak_space are on the function that held the
	// most at the peak; the module frame is model.<module>, never
	// <unknown> (pprof's symbolizer runs by default: it is what renamed it).
	path := filepath.Join(dir, "profile.pb.gz")
	assert.Equal(t, peakFn, pprofFlatTop(t, path, "peak_space"))
	p := mustParseProfile(t, path)
	modules := 0
	for _, fn := range p.Function {
		assert.NotEqual(t, "<unknown>", fn.Name)
		if fn.SystemName == "<module>" && strings.HasSuffix(fn.Filename, "model.py") {
			modules++
			assert.Equal(t, "model.<module>", fn.Name)
		}
	}
	assert.Equal(t, 1, modules, "model.py's module frame")
	out, err := exec.Command("go", "tool", "pprof", "-traces", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "model.<module>")
	assert.NotContains(t, string(out), "<unknown>")
}
