package report

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

func mustHTML(tb testing.TB, res *analysis.Result) []byte {
	tb.Helper()
	var buf bytes.Buffer
	require.NoError(tb, WriteHTML(&buf, res))
	return buf.Bytes()
}

// analyzed is recs analysed as the tool does (default options: full
// timelines), unlike mustResult's small ones.
func analyzed(tb testing.TB, recs []event.Record) *analysis.Result {
	tb.Helper()
	a := analysis.New(analysis.Options{})
	for _, r := range recs {
		require.NoError(tb, a.Add(r))
	}
	return a.Finish()
}

func TestHTMLGolden(t *testing.T) {
	got := mustHTML(t, mustResult(t, trainRecords()))
	path := filepath.Join("testdata", "train.html.golden")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./report -update to create it")
	if d := diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs from the golden file (-want +got; -update rewrites it):\n%s", path, d)
	}
}

func TestHTMLDeterministic(t *testing.T) {
	for name, recs := range scenarios {
		a, b := mustHTML(t, mustResult(t, recs())), mustHTML(t, mustResult(t, recs()))
		assert.True(t, bytes.Equal(a, b), name)
	}
	assert.ErrorIs(t, WriteHTML(&bytes.Buffer{}, nil), ErrNilResult)
}

func TestHTMLContents(t *testing.T) {
	page := string(mustHTML(t, mustResult(t, trainRecords())))
	for _, want := range []string{
		"<title>vramprof: python train.py</title>",
		// Run facts, lost events among them.
		"<dt>mode</dt><dd>run</dd>", "<dd>60.0 s</dd>", "exited, exit code 1", `<span class="n">183</span>`,
		`<dt>lost events</dt><dd class="warn-text"><span class="n">4</span>`,
		"/usr/lib/x86_64-linux-gnu/libcudart.so.12",
		// Human units, the exact bytes on hover.
		`<span class="b" title="3405774848 bytes">3.17 GiB</span>`,
		// A chart per device, the peak and the OOM marked, the leak shaded.
		`aria-label="Device 0"`, `aria-label="Device unknown"`, ">peak 3.17 GiB</text>",
		">OOM: 4.00 GiB request</text>", "#3 leak &#43;944.00 MiB",
		// Findings with remediation, the icicle, the leak table.
		`id="finding-1"`, "free or detach the buffers allocated at record_metrics (train.py:77)",
		"Stacks at the peak of pid 100: 3.17 GiB (3405774848 bytes)", ">load_weights (train.py:12)</text>",
		// The leak's growth over the run, 59 x 16 MiB = 989855744 bytes, at
		// 16 MiB per second: per second, as the windows observed ~49 s.
		`<td class="r"><span class="b" title="989855744 bytes">944.00 MiB</span></td><td class="r rate">16.00 MiB per second</td>`,
	} {
		contains(t, page, want)
	}
	// NVML off: no NVML columns; the attach scenario has them and diamonds.
	assert.NotContains(t, page, "NVML samples")
	attach := string(mustHTML(t, mustResult(t, attachRecords())))
	contains(t, attach, "NVML samples")
	contains(t, attach, `<g class="nvml"`)
	// Pinned host memory gets its own chart, and VMM its table.
	mixed := string(mustHTML(t, mustResult(t, mixedRecords())))
	contains(t, mixed, `aria-label="Pinned host memory"`)
	contains(t, mixed, "<h2>Virtual memory (VMM)</h2>")
	contains(t, mixed, "<h2>API books</h2>")
	// Cut short, with a block layer: said in the header, drawn dashed.
	cut := string(mustHTML(t, mustResult(t, cutRecords())))
	contains(t, cut, "cut short (no end record)")
	contains(t, cut, ": allocated (block layer)")
	contains(t, cut, `class="line dashed"`)
	contains(t, cut, "<p>0 records lost.</p>")
}

// contains is assert.Contains without the page in the message.
func contains(tb testing.TB, page, want string) {
	tb.Helper()
	if !strings.Contains(page, want) {
		tb.Errorf("report.html lacks %q", want)
	}
}

// hostileRecords names a function, a file, the command, the host and a
// library with markup, so that unescaped output would run a script or
// break an attribute.
func hostileRecords() []event.Record {
	const bad = `<script>alert(1)</script>`
	const quote = `a&b"c`
	recs := trainRecords()
	for i, r := range recs {
		switch r := r.(type) {
		case *event.Header:
			h := *r
			h.Command, h.Host = []string{"python", bad, quote}, quote+bad
			recs[i] = &h
		case *event.Process:
			p := *r
			p.Command, p.Exe = []string{bad, quote}, "/bin/"+quote
			recs[i] = &p
		case *event.Library:
			l := *r
			l.Path, l.BuildID, l.Symbols = "/lib/"+bad, quote, []string{bad, quote}
			recs[i] = &l
		case *event.Stack:
			s := *r
			s.Frames = append([]event.Frame(nil), r.Frames...)
			s.Frames[2].Function, s.Frames[2].File = bad+quote, quote+".py"
			recs[i] = &s
		}
	}
	return recs
}

func TestHTMLEscapesTargetStrings(t *testing.T) {
	page := string(mustHTML(t, mustResult(t, hostileRecords())))
	assert.Equal(t, 1, strings.Count(strings.ToLower(page), "<script"), "only the page's own script")
	assert.False(t, strings.Contains(page, "alert(1)</script>"), "raw markup from the target")
	assert.False(t, strings.Contains(page, `a&b"c`), "raw quote from the target")
	// The command, in the title and the header; a frame, in the icicle's
	// text and tooltip; a library path.
	contains(t, page, "<title>vramprof: python &lt;script&gt;alert(1)&lt;/script&gt; a&amp;b&#34;c</title>")
	contains(t, page, `<div class="cmd mono">python &lt;script&gt;alert(1)&lt;/script&gt; a&amp;b&#34;c</div>`)
	contains(t, page, "<title>&lt;script&gt;alert(1)&lt;/script&gt;a&amp;b&#34;c (a&amp;b&#34;c.py:40)\n")
	contains(t, page, `<td class="site mono">/lib/&lt;script&gt;alert(1)&lt;/script&gt;</td>`)
}

func TestHTMLSelfContained(t *testing.T) {
	for name, recs := range scenarios {
		page := string(mustHTML(t, mustResult(t, recs())))
		for _, bad := range []string{"http:", "https:", "//cdn", "@import", "url(", "src=", "<link", "<iframe", "<img"} {
			assert.False(t, strings.Contains(page, bad), "%s: the page must load nothing, has %q", name, bad)
		}
		for _, href := range regexp.MustCompile(`href="([^"]*)"`).FindAllStringSubmatch(page, -1) {
			assert.True(t, strings.HasPrefix(href[1], "#"), "%s: link %q leaves the page", name, href[1])
		}
		contains(t, page, `http-equiv="Content-Security-Policy" content="default-src &#39;none&#39;;`)
	}
}

// syntheticRecords is a stream of n allocation events (n/2 allocations, n/2
// frees) from one process on two devices: 200 stacks alloc and free in a
// loop, one stack leaks every 64th iteration, and a spike every 10000th.
// Time advances 10 µs per event.
func syntheticRecords(n int) []event.Record {
	recs := []event.Record{
		&event.Header{Version: 1, Tool: "vramprof test", Mode: "run", Command: []string{"python", "big.py"}, PID: 9, Start: 1},
		&event.Process{PID: 9, Command: []string{"python", "big.py"}, Time: 1},
	}
	for s := 1; s <= 200; s++ {
		recs = append(recs, &event.Stack{ID: event.StackID(s), PID: 9, Frames: []event.Frame{
			{Function: "cudaMalloc"},
			{Function: fmt.Sprintf("layer_%d", s), File: "model.py", Line: int64(s)},
			{Function: fmt.Sprintf("block_%d", s%10), File: "model.py", Line: 1000 + int64(s%10)},
			{Function: "main", File: "big.py", Line: 1},
		}})
	}
	t := uint64(1)
	ev := func(k event.Kind, addr, size uint64, stack int, dev int32) {
		t += 10_000
		api := event.APICudaMalloc
		if k == event.KindFree {
			api = event.APICudaFree
		}
		recs = append(recs, &event.Event{Time: t, PID: 9, Kind: k, Layer: event.LayerSegment, API: api, Addr: addr,
			Size: size, Stack: event.StackID(stack), Device: dev})
	}
	leak := uint64(0)
	for i := 0; len(recs) < n; i++ {
		s := i%200 + 1
		size := uint64(s) * MiB
		dev := int32(i % 2)
		if i%10000 == 9999 {
			size = 4 * GiB
		}
		if i%64 == 0 {
			leak++
			ev(event.KindAlloc, 1<<40+leak<<20, MiB, 1, 0)
			continue
		}
		addr := uint64(0x1000000 + i%7*0x100000000)
		ev(event.KindAlloc, addr, size, s, dev)
		ev(event.KindFree, addr, 0, s, dev)
	}
	return append(recs, &event.End{Time: t + 1, Reason: "exited"})
}

// TestHTMLSize shows that the page does not grow with the number of events:
// the timelines are capped, the tables and the icicle bounded. (The issue's
// target: under 5 MB for 10 M events.)
func TestHTMLSize(t *testing.T) {
	if testing.Short() {
		t.Skip("analyses a million events")
	}
	size := func(n int) int {
		a := analysis.New(analysis.Options{})
		for _, r := range syntheticRecords(n) {
			require.NoError(t, a.Add(r))
		}
		res := a.Finish()
		require.GreaterOrEqual(t, res.Run.Events, uint64(n)-300)
		return len(mustHTML(t, res))
	}
	small, large := size(10_000), size(1_000_000)
	t.Logf("report.html: %d bytes for 1e4 events, %d bytes for 1e6 events", small, large)
	assert.Less(t, large, 1<<20, "1e6 events: under 1 MB")
	assert.InDelta(t, small, large, 8<<10, "1e4 and 1e6 events: within a few KB")
}

// TestHTMLRendersInChromium opens report.html in headless Chromium (Debian's
// chromium package): it must render (a screenshot of some size), run its
// own script (which marks <html> data-rendered="ok" and counts the charts)
// and log nothing to the console: no error, no load that the page's CSP
// blocked. The screenshots are kept in $VRAMPROF_ARTIFACTS when set.
// Without Chromium the test skips, except under CI=true, where it fails.
func TestHTMLRendersInChromium(t *testing.T) {
	browser := findChromium(t)
	dir := os.Getenv("VRAMPROF_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for _, tc := range []struct {
		name   string
		recs   []event.Record
		charts int
	}{
		{"train", trainRecords(), 3}, // two devices and the leak's own chart
		{"attach", attachRecords(), 2},
		{"mixed", mixedRecords(), 3},
		{"hostile", hostileRecords(), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := filepath.Join(dir, "report-"+tc.name+".html")
			require.NoError(t, os.WriteFile(page, mustHTML(t, analyzed(t, tc.recs)), 0o644))
			png := filepath.Join(dir, "report-"+tc.name+".png")
			_ = os.Remove(png)

			stderr, _ := chromium(t, browser, "--screenshot="+png, "--window-size=1400,2400",
				"--enable-logging=stderr", "--v=0", "file://"+page)
			st, err := os.Stat(png)
			require.NoError(t, err, "no screenshot; chromium said:\n%s", stderr)
			assert.Greater(t, st.Size(), int64(20<<10), "the screenshot shows something")
			for _, l := range strings.Split(stderr, "\n") {
				if strings.Contains(l, ":CONSOLE") || strings.Contains(l, "Uncaught") {
					t.Errorf("console: %s", l)
				}
			}
			t.Logf("screenshot: %s", png)

			_, dom := chromium(t, browser, "--dump-dom", "file://"+page)
			html := regexp.MustCompile(`<html[^>]*>`).FindString(dom)
			assert.Contains(t, html, `data-rendered="ok"`, "the page's script ran")
			assert.Contains(t, html, fmt.Sprintf(`data-charts="%d"`, tc.charts))
			assert.NotContains(t, html, "data-error")
			assert.NotContains(t, dom, "<script>alert", "markup from the target stays text")
		})
	}
}

// findChromium returns Debian's chromium; without it the test skips, or
// fails under CI=true.
func findChromium(tb testing.TB) string {
	tb.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal("chromium not found: the HTML render test needs it under CI (apt-get install chromium)")
	}
	tb.Skip("chromium not found (apt-get install chromium): the HTML render test needs it")
	return ""
}

// chromium runs headless Chromium with the flags this machine needs (no
// sandbox as root, no GPU, no background network) and a fresh profile, and
// returns its stderr and stdout.
func chromium(tb testing.TB, browser string, args ...string) (stderr, stdout string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir=" + tb.TempDir()}
	cmd := exec.CommandContext(ctx, browser, append(base, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(tb, cmd.Run(), "chromium %v:\n%s", args, errb.String())
	return errb.String(), out.String()
}

// TestHTMLPlaceLabels: labels of marks at the same moment (a peak and an
// OOM at the end of a run, a finding beside them, a leak's span) are laid
// out apart and inside the chart; one that fits nowhere is dropped, its
// mark kept.
func TestHTMLPlaceLabels(t *testing.T) {
	c, sc := newAxes("t", chartH, 0, 100, 100)
	end := sc.x(100)
	for _, m := range []mark{
		{Kind: "peak", Label: "peak 960.00 MiB"},
		{Kind: "oom", Label: "OOM: 384.00 MiB request"},
		{Kind: "finding", Label: "#4 cache_growth"},
	} {
		placeLabel(&m, end, sc.y(100))
		c.Marks = append(c.Marks, m)
	}
	c.Regions = []region{{Label: "#3 leak +60.00 MiB", x0: sc.x(80), x1: end}}
	placeLabels(c)
	var boxes []labelBox
	add := func(label, x, y, anchor string) {
		require.NotEmpty(t, label)
		lx, err := strconv.ParseFloat(x, 64)
		require.NoError(t, err)
		ly, err := strconv.ParseFloat(y, 64)
		require.NoError(t, err)
		w := float64(len(label)) * markCharW
		if anchor == "end" {
			lx -= w
		}
		b := labelBox{lx, ly - 10, lx + w, ly + 3}
		assert.GreaterOrEqual(t, b.x0, float64(chartLeft), label)
		assert.LessOrEqual(t, b.x1, float64(chartW), label)
		assert.GreaterOrEqual(t, b.y0, 0.0, label)
		assert.LessOrEqual(t, b.y1, float64(chartH-chartBottom), label)
		for _, o := range boxes {
			assert.False(t, b.overlaps(o), "%s overlaps another label", label)
		}
		boxes = append(boxes, b)
	}
	for _, m := range c.Marks {
		add(m.Label, m.LabelX, m.LabelY, m.Anchor)
	}
	add(c.Regions[0].Label, c.Regions[0].LabelX, c.Regions[0].LabelY, c.Regions[0].Anchor)

	// No room at all: the label goes, the mark stays.
	tiny, sc := newAxes("t", chartTop+chartBottom+10, 0, 100, 100)
	for range 12 {
		m := mark{Kind: "finding", Label: strings.Repeat("x", 40)}
		placeLabel(&m, sc.x(50), chartTop)
		tiny.Marks = append(tiny.Marks, m)
	}
	placeLabels(tiny)
	assert.Len(t, tiny.Marks, 12)
	assert.Empty(t, tiny.Marks[11].Label)
}

// TestHTMLOOMMoment: an oom moment report recorded from testdata/oom (its
// allocations in the last 60 µs of 1.41 s) starts its time axis where
// memory was first live, says so, and writes times as the page does
// everywhere (no Go durations such as "1.409532893s"); the icicle starts
// at the program's main, not at libc's unnamed frame.
func TestHTMLOOMMoment(t *testing.T) {
	res := oomMomentResult(t)
	page := string(mustHTML(t, res))
	charts := timelineCharts(res)
	require.NotEmpty(t, charts)
	assert.Greater(t, charts[0].T0, res.Run.Duration/2, "the axis starts near the allocations")
	contains(t, page, "The axis starts at &#43;1.41 s: nothing traced was live before.")
	contains(t, page, "these figures are the trace up to oom moment (oom 1, at &#43;1.41 s)")
	contains(t, page, "a moment report (oom 1, at &#43;1.41 s)")
	assert.NotRegexp(t, `\d\.\d{4,}s\b`, page, "a Go duration")
	contains(t, page, ">OOM: 384.00 MiB request</text>")
	assert.NotContains(t, page, `data-n="0x`, "an icicle frame without a symbol")
	contains(t, page, `<g data-l="0" data-o="0" data-b="1006632960" data-n="main (scenarios/oom.c:62)">`)
	// report.md keeps its exact duration.
	var md bytes.Buffer
	require.NoError(t, WriteMarkdown(&md, res))
	assert.Regexp(t, `\(oom 1, 1\.\d+s after the start\)`, md.String())
}

// TestHTMLTimeTicks: the time axis of a span that starts late is labelled
// from its start, never "-0 s".
func TestHTMLTimeTicks(t *testing.T) {
	var labels []string
	for _, tk := range timeTicks(960e6, 1140e6) {
		labels = append(labels, tk.label)
	}
	assert.Equal(t, []string{"0.96 s", "0.98 s", "1.00 s", "1.02 s", "1.04 s", "1.06 s", "1.08 s", "1.10 s", "1.12 s", "1.14 s"}, labels)
	assert.Equal(t, "0 s", timeTicks(0, 60e9)[0].label)
}

// vptRecords reads a recorded trace from testdata: its header, then every
// record.
func vptRecords(tb testing.TB, name string) []event.Record {
	tb.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	require.NoError(tb, err)
	defer f.Close()
	r, err := event.NewReader(bufio.NewReader(f))
	require.NoError(tb, err)
	recs := []event.Record{r.Header()}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return recs
		}
		require.NoError(tb, err)
		if e, ok := rec.(*event.Event); ok {
			c := *e // the reader reuses its Event
			rec = &c
		}
		recs = append(recs, rec)
	}
}

// oomMoment closes recs at their first out-of-memory failure, as the
// recorder writes an oom moment report
// (cmd/vramprof/internal/recorder/moment.go).
func oomMoment(tb testing.TB, recs []event.Record) *analysis.Result {
	tb.Helper()
	a := analysis.New(analysis.Options{})
	for _, r := range recs {
		if _, ok := r.(*event.End); ok {
			break
		}
		require.NoError(tb, a.Add(r))
		// The program's request, not the driver call nested in it.
		if e, ok := r.(*event.Event); ok && e.Kind == event.KindAlloc && e.Flags&event.FlagNested == 0 &&
			e.Layer == event.LayerSegment && analysis.IsOutOfMemory(e.Ret) {
			at := e.Time + 1000
			require.NoError(tb, a.Add(&event.End{Time: at, Reason: analysis.MomentOOMReason}))
			res := a.Finish()
			res.Run.Moment = &analysis.Moment{Kind: analysis.MomentOOM, Index: 1, Time: at, Request: e}
			return res
		}
	}
	tb.Fatal("no out-of-memory failure in the records")
	return nil
}

// oomMomentResult is the oom moment report of testdata/oom, recorded by
// `vramprof run` (testdata/oom.vpt): 1.41 s of Python-free start-up, then
// five allocations and a failed one in 60 µs.
func oomMomentResult(tb testing.TB) *analysis.Result {
	tb.Helper()
	return oomMoment(tb, vptRecords(tb, "oom.vpt"))
}

func TestHTMLHumanFirst(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"peaked at 1006632960 bytes (960.00 MiB) at +1.41 s", "peaked at 960.00 MiB (1006632960 bytes) at +1.41 s"},
		{"120852480 bytes (115.25 MiB, 21.5% of the peak) in 5", "115.25 MiB (120852480 bytes, 21.5% of the peak) in 5"},
		{"(+53477376 bytes (51.00 MiB) from +1.00 s", "(+51.00 MiB (53477376 bytes) from +1.00 s"},
		{"it: 335544320 bytes at grow_buffers", "it: 320.00 MiB (335544320 bytes) at grow_buffers"},
		{"162779136 bytes (30.8% of the 528482304 reserved)", "155.24 MiB (162779136 bytes, 30.8% of the 528482304 reserved)"},
		{"asked for 384.00 MiB (402653184 bytes) at", "asked for 384.00 MiB (402653184 bytes) at"},
		{"512 bytes (512 B) and 1000 bytes", "512 B (512 bytes) and 1000 bytes"},
		{"live bytes +167772160 per iteration", "live bytes +167772160 per iteration"},
	} {
		assert.Equal(t, tc.want, humanFirst(tc.in), tc.in)
		assert.Equal(t, tc.want, humanFirst(humanFirst(tc.in)), "twice: %s", tc.in)
	}
}
