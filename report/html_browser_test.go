//go:build linux

package report

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The layout test opens report.html in headless Chromium, driven through
// the DevTools protocol over a pipe (--remote-debugging-pipe: no port, no
// websocket, no dependency), at the widths people read it at, and checks
// in the page that nothing runs off the edge, is clipped or overlaps; then
// it uses the page as a person would (click a frame, search, drag across a
// chart) with real mouse and keyboard input.

// layoutWidths are the viewport widths every view is checked at: a desktop
// window and a narrow one (a laptop's half screen).
var layoutWidths = []int{1400, 800}

// layoutViews are the reports checked: synthetic runs (a leak and an OOM
// over two devices; NVML; pinned host memory and VMM; markup in every
// string) and two recorded by `vramprof run` from testdata programs: a
// trainer whose step leaks (corpus_b_step_leak, block layer traced) and
// the oom moment report of a program that runs out of memory (oom).
func layoutViews(tb testing.TB) []struct {
	name string
	rep  *Report
} {
	return []struct {
		name string
		rep  *Report
	}{
		{"train", &Report{Result: analyzed(tb, trainRecords())}},
		{"attach", &Report{Result: analyzed(tb, attachRecords())}},
		{"mixed", &Report{Result: analyzed(tb, mixedRecords())}},
		{"hostile", &Report{Result: analyzed(tb, hostileRecords())}},
		{"step-leak", &Report{Result: analyzed(tb, vptRecords(tb, "step_leak.vpt"))}},
		{"oom-moment", &Report{Result: oomMomentResult(tb)}},
		// The Tests table, its limits column and a long node id.
		{"pytest", mustReport(tb, pytestRecords(), func(id string) *TestLimit {
			return &TestLimit{Bytes: 32 * MiB, From: "/home/ci/work/project/tests/gpu/vramprof.limits:12"}
		})},
	}
}

// TestHTMLLayoutInChromium checks every view at every layoutWidths width:
// the page never scrolls sideways; every element with text lies inside the
// viewport (or inside a container that scrolls sideways on its own); no
// text overflows its box unless it is cut with an ellipsis and has its
// whole in a tooltip; the processes table fits without scrolling; chart
// labels stay inside their chart and off each other; icicle labels fit
// their frames; no icicle starts at a frame without a symbol. Then it
// zooms into a frame, searches, and selects a span of a timeline, and
// checks again. Screenshots go to $VRAMPROF_ARTIFACTS (else a temporary
// directory). Without Chromium the test skips, except under CI=true.
func TestHTMLLayoutInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	browser := findChromium(t)
	dir := os.Getenv("VRAMPROF_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	b := startBrowser(t, browser)
	problems := 0
	for _, v := range layoutViews(t) {
		page := filepath.Join(dir, "layout-"+v.name+".html")
		var html bytes.Buffer
		require.NoError(t, v.rep.WriteHTML(&html))
		require.NoError(t, os.WriteFile(page, html.Bytes(), 0o644))
		for _, w := range layoutWidths {
			t.Run(fmt.Sprintf("%s/%d", v.name, w), func(t *testing.T) {
				b.open(t, "file://"+page, w)
				shot := filepath.Join(dir, fmt.Sprintf("layout-%s-%d.png", v.name, w))
				b.screenshot(t, shot)
				t.Logf("screenshot: %s", shot)
				got := b.layout(t)
				problems += len(got.Problems)
				for _, p := range got.Problems {
					t.Errorf("%s at %d px: %s", v.name, w, p)
				}
				t.Logf("checked %d text elements, %d chart labels, %d icicle labels; scrolling inside their own box: %v",
					got.Texts, got.ChartLabels, got.FlameLabels, got.Scrollers)
				// What the page folds away (stacks, evidence, functions)
				// must fit too, once opened.
				var opened int
				b.eval(t, `[...document.querySelectorAll("details")].map(d => d.open = true).length`, &opened)
				for _, p := range b.layout(t).Problems {
					t.Errorf("%s at %d px, %d <details> opened: %s", v.name, w, opened, p)
				}
				b.eval(t, `document.querySelectorAll("details").forEach(d => d.open = false)`, nil)
				b.exercise(t, v.name, w, dir)
			})
		}
	}
	t.Logf("%d layout problems", problems)
}

// layoutResult is what layoutJS finds.
type layoutResult struct {
	Problems    []string
	Texts       int
	ChartLabels int
	FlameLabels int
	Scrollers   []string
}

// layoutJS is the layout check run in the page; see TestHTMLLayoutInChromium.
const layoutJS = `(() => {
  const W = window.innerWidth, probs = [], scrollers = [];
  const de = document.documentElement;
  if (de.scrollWidth > W) probs.push("the page scrolls sideways: " + de.scrollWidth + " px wide in " + W);
  const shown = el => {
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.display === "none" || s.visibility === "hidden") return false;
      if (e.tagName === "DETAILS" && !e.open && e !== el && !el.closest("summary")) return false;
    }
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const say = el => el.tagName.toLowerCase() + (typeof el.className === "string" && el.className ? "." + el.className.replace(/ /g, ".") : "") +
    " " + JSON.stringify((el.textContent || "").trim().slice(0, 50));
  const scroller = el => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === "auto" || o === "scroll") return p;
    }
    return null;
  };
  let texts = 0;
  for (const el of document.body.querySelectorAll("*")) {
    if (el.closest("svg")) continue;
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim() !== "");
    if (!own && !["INPUT", "BUTTON", "TABLE"].includes(el.tagName)) continue;
    if (!shown(el)) continue;
    texts++;
    const r = el.getBoundingClientRect(), s = getComputedStyle(el), sc = scroller(el);
    const box = sc ? sc.getBoundingClientRect() : {left: 0, right: W};
    if (sc && sc.scrollWidth > sc.clientWidth + 1 && !scrollers.includes(say(sc).slice(0, 60))) scrollers.push(say(sc).slice(0, 60));
    if (box.left < -0.5 || box.right > W + 0.5) probs.push("off the edge (" + Math.round(box.left) + " to " + Math.round(box.right) + " px): " + say(sc || el));
    else if (!sc && (r.left < -0.5 || r.right > W + 0.5)) probs.push("off the edge (" + Math.round(r.left) + " to " + Math.round(r.right) + " px): " + say(el));
    const cut = s.textOverflow === "ellipsis" && el.title !== "";
    const scrolls = s.overflowX === "auto" || s.overflowX === "scroll";
    if (s.display !== "inline" && !cut && !scrolls && el.scrollWidth > el.clientWidth + 1)
      probs.push("text overflows its box (" + el.scrollWidth + " > " + el.clientWidth + " px): " + say(el));
  }
  const procs = document.querySelector("table.procs");
  if (procs && procs.scrollWidth > procs.clientWidth + 1) probs.push("the processes table needs scrolling: " + procs.scrollWidth + " px in " + procs.clientWidth);
  let chartLabels = 0;
  for (const svg of document.querySelectorAll("svg.chart")) {
    const sb = svg.getBoundingClientRect();
    const labels = [...svg.querySelectorAll("text")].filter(shown).map(t => ({t, r: t.getBoundingClientRect()}));
    chartLabels += labels.length;
    for (const {t, r} of labels)
      if (r.left < sb.left - 0.5 || r.right > sb.right + 0.5 || r.top < sb.top - 0.5 || r.bottom > sb.bottom + 0.5)
        probs.push("chart label clipped by its chart: " + say(t) + " in " + svg.getAttribute("aria-label"));
    for (let i = 0; i < labels.length; i++) for (let j = i + 1; j < labels.length; j++) {
      const a = labels[i].r, b = labels[j].r;
      if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
        probs.push("chart labels overlap: " + say(labels[i].t) + " and " + say(labels[j].t) + " in " + svg.getAttribute("aria-label"));
    }
  }
  let flameLabels = 0;
  for (const svg of document.querySelectorAll("svg.flame")) {
    for (const g of svg.querySelectorAll("g")) {
      if (!shown(g)) continue;
      const t = g.querySelector("text"), rect = g.querySelector("rect");
      if (g.getAttribute("data-l") === "0" && /^0x[0-9a-f]+ \(/.test(g.getAttribute("data-n"))) probs.push("an icicle starts at a frame without a symbol: " + say(g));
      if (!t || t.textContent === "") continue;
      flameLabels++;
      if (t.getBoundingClientRect().width > rect.getBoundingClientRect().width + 0.5) probs.push("icicle label wider than its frame: " + say(t));
    }
  }
  return {Problems: probs, Texts: texts, ChartLabels: chartLabels, FlameLabels: flameLabels, Scrollers: scrollers};
})()`

// exercise uses the page: zooms into an icicle frame and back, searches,
// and selects a span of the first timeline, checking the layout after
// each.
func (b *browser) exercise(t *testing.T, view string, width int, dir string) {
	// checked checks the layout after an interaction, and keeps a
	// screenshot of it at the first width.
	checked := func(after string) {
		t.Helper()
		for _, p := range b.layout(t).Problems {
			t.Errorf("after %s: %s", after, p)
		}
		if width == layoutWidths[0] {
			b.screenshot(t, filepath.Join(dir, fmt.Sprintf("layout-%s-%d-%s.png", view, width, after)))
		}
	}
	var flame struct {
		Nodes   int
		Name    string
		Level   int
		X, Y    float64
		Matches int
		Query   string
	}
	// A frame on the second row (or the first), its centre in the
	// viewport once scrolled to.
	b.eval(t, `(() => {
	  const svg = document.querySelector("svg.flame");
	  if (!svg) return {Nodes: 0};
	  const gs = [...svg.querySelectorAll("g")];
	  const g = gs.find(g => g.getAttribute("data-l") === "1") || gs[0];
	  g.scrollIntoView({block: "center"});
	  const r = g.querySelector("rect").getBoundingClientRect(), name = g.getAttribute("data-n");
	  const q = name.split(/[ (:]/)[0].slice(0, 12).toLowerCase();
	  return {Nodes: gs.length, Name: name, Level: Number(g.getAttribute("data-l")), X: r.left + Math.min(r.width / 2, 40), Y: r.top + r.height / 2,
	    Matches: gs.filter(g => g.getAttribute("data-n").toLowerCase().includes(q)).length, Query: q};
	})()`, &flame)
	if flame.Nodes > 0 {
		b.click(t, flame.X, flame.Y)
		var zoomed struct {
			Top      string
			TopWidth float64
			Crumbs   int
			Reset    bool
		}
		b.eval(t, `(() => {
		  const svg = document.querySelector("svg.flame"), tools = svg.previousElementSibling;
		  const top = [...svg.querySelectorAll("g")].find(g => g.style.display !== "none");
		  return {Top: top.getAttribute("data-n"), TopWidth: Number(top.querySelector("rect").getAttribute("width")),
		    Crumbs: tools.querySelectorAll(".flame-crumbs a").length, Reset: !tools.querySelector(".flame-reset").hidden};
		})()`, &zoomed)
		assert.Equal(t, flame.Name, zoomed.Top, "the clicked frame is the icicle's root")
		assert.InDelta(t, 999.5, zoomed.TopWidth, 0.1, "the clicked frame spans the icicle")
		assert.Equal(t, flame.Level+1, zoomed.Crumbs, "a way back up to each frame above")
		assert.True(t, zoomed.Reset, "a reset button")
		checked("icicle-zoomed")
		b.eval(t, `document.querySelector(".flame-reset").click()`, nil)
		var nodes int
		b.eval(t, `[...document.querySelector("svg.flame").querySelectorAll("g")].filter(g => g.style.display !== "none").length`, &nodes)
		assert.Equal(t, flame.Nodes, nodes, "reset shows every frame again")

		// Type into the search box: the frames whose names hold the
		// query light up, and the bytes they hold are said.
		b.eval(t, `document.querySelector(".flame-search").focus()`, nil)
		b.call(t, "Input.insertText", map[string]any{"text": flame.Query}, nil)
		var found struct {
			Hits  int
			Lit   int
			Match string
		}
		b.eval(t, `(() => {
		  const svg = document.querySelector("svg.flame");
		  return {Hits: Number(svg.getAttribute("data-hits")), Lit: svg.querySelectorAll("g.hit").length,
		    Match: svg.previousElementSibling.querySelector(".flame-match").textContent};
		})()`, &found)
		assert.Positive(t, flame.Matches)
		assert.Equal(t, flame.Matches, found.Hits, "search %q", flame.Query)
		assert.Equal(t, flame.Matches, found.Lit, "highlighted frames for %q", flame.Query)
		assert.Regexp(t, `^\d+ frames match: [\d.]+ [KMGTP]?i?B \([\d.]+% of the peak\)$`, found.Match)
		checked("icicle-search")
	}

	// Drag across the middle of the first timeline's plot: the axis
	// then spans that part of the run.
	var chart struct {
		Charts           int
		T0, T1           float64
		Left, Right, Mid float64
		Ticks            string
	}
	b.eval(t, `(() => {
	  const svg = document.querySelector("svg.chart");
	  if (!svg) return {Charts: 0};
	  svg.scrollIntoView({block: "center"});
	  const r = svg.querySelector("rect.plot").getBoundingClientRect();
	  return {Charts: document.querySelectorAll("svg.chart").length, T0: Number(svg.getAttribute("data-t0")), T1: Number(svg.getAttribute("data-t1")),
	    Left: r.left, Right: r.right, Mid: r.top + r.height / 2,
	    Ticks: [...svg.querySelectorAll("g.xaxis text")].map(t => t.textContent).join(" ")};
	})()`, &chart)
	if chart.Charts == 0 {
		return
	}
	x0, x1 := chart.Left+0.3*(chart.Right-chart.Left), chart.Left+0.6*(chart.Right-chart.Left)
	b.drag(t, x0, x1, chart.Mid)
	var zoomed struct {
		Range  string
		Ticks  string
		Unzoom bool
		Along  int // charts zoomed to the same span
	}
	b.eval(t, `(() => {
	  const svg = document.querySelector("svg.chart"), r = svg.getAttribute("data-range") || "";
	  return {Range: r, Ticks: [...svg.querySelectorAll("g.xaxis text")].map(t => t.textContent).join(" "),
	    Unzoom: !svg.parentNode.querySelector("button.unzoom").hidden,
	    Along: [...document.querySelectorAll("svg.chart")].filter(s => s.getAttribute("data-range") === r).length};
	})()`, &zoomed)
	var a, z float64
	_, err := fmt.Sscanf(zoomed.Range, "%g %g", &a, &z)
	require.NoError(t, err, "the chart says its range after a drag: %q", zoomed.Range)
	span := chart.T1 - chart.T0
	assert.InDelta(t, chart.T0+0.3*span, a, 0.02*span, "the selection's start")
	assert.InDelta(t, chart.T0+0.6*span, z, 0.02*span, "the selection's end")
	assert.NotEqual(t, chart.Ticks, zoomed.Ticks, "the time axis is drawn again for the span")
	assert.True(t, zoomed.Unzoom, "a way back to the whole run")
	assert.Equal(t, chart.Charts, zoomed.Along, "every chart on the same time axis follows")
	checked("timeline-zoomed")
	b.eval(t, `document.querySelector("button.unzoom").click()`, nil)
	var back string
	b.eval(t, `[...document.querySelector("svg.chart").querySelectorAll("g.xaxis text")].map(t => t.textContent).join(" ")`, &back)
	assert.Equal(t, chart.Ticks, back, "the whole run's axis again")
}

func (b *browser) layout(t *testing.T) layoutResult {
	t.Helper()
	var got layoutResult
	b.eval(t, layoutJS, &got)
	return got
}

// browser is headless Chromium driven over --remote-debugging-pipe: the
// DevTools protocol's JSON messages, each ended by a NUL byte, on the
// child's fds 3 (commands in) and 4 (replies and events out). One page,
// attached to with a flat session. Not safe for concurrent use.
type browser struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	id      int
	session string
}

// startBrowser starts Chromium and opens a page; the browser and every
// process it started are killed when tb ends.
func startBrowser(tb testing.TB, path string) *browser {
	tb.Helper()
	inR, inW, err := os.Pipe()
	require.NoError(tb, err)
	outR, outW, err := os.Pipe()
	require.NoError(tb, err)
	cmd := exec.Command(path, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--disable-extensions", "--mute-audio", "--remote-debugging-pipe", "--user-data-dir="+tb.TempDir(), "about:blank")
	cmd.ExtraFiles = []*os.File{inR, outW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its renderers and helpers go with it
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(tb, cmd.Start())
	inR.Close()
	outW.Close()
	b := &browser{cmd: cmd, in: inW, out: bufio.NewReader(outR)}
	tb.Cleanup(func() {
		inW.Close() // Chromium exits when its pipe closes
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		outR.Close()
	})
	var target struct{ TargetID string }
	b.call(tb, "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct{ SessionID string }
	b.call(tb, "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	b.session = attached.SessionID
	b.call(tb, "Runtime.enable", nil, nil)
	return b
}

// call sends one command to the page's session (the browser's before
// there is one) and decodes its result into res.
func (b *browser) call(tb testing.TB, method string, params map[string]any, res any) {
	tb.Helper()
	b.id++
	msg := map[string]any{"id": b.id, "method": method, "params": params}
	if params == nil {
		msg["params"] = map[string]any{}
	}
	if b.session != "" {
		msg["sessionId"] = b.session
	}
	buf, err := json.Marshal(msg)
	require.NoError(tb, err)
	_, err = b.in.Write(append(buf, 0))
	require.NoError(tb, err, "%s: write to chromium", method)
	deadline := time.AfterFunc(60*time.Second, func() { _ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL) })
	defer deadline.Stop()
	for {
		line, err := b.out.ReadBytes(0)
		require.NoError(tb, err, "%s: chromium closed its pipe", method)
		var reply struct {
			ID     int
			Result json.RawMessage
			Error  *struct{ Message string }
		}
		require.NoError(tb, json.Unmarshal(line[:len(line)-1], &reply))
		if reply.ID != b.id {
			continue // an event
		}
		require.Nil(tb, reply.Error, "%s: %+v", method, reply.Error)
		if res != nil {
			require.NoError(tb, json.Unmarshal(reply.Result, res), "%s: %s", method, reply.Result)
		}
		return
	}
}

// eval evaluates a JavaScript expression in the page and decodes its value
// into res; an exception fails the test.
func (b *browser) eval(tb testing.TB, expr string, res any) {
	tb.Helper()
	var out struct {
		Result struct {
			Value json.RawMessage
		}
		ExceptionDetails *struct {
			Text      string
			Exception struct{ Description string }
		}
	}
	b.call(tb, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &out)
	if e := out.ExceptionDetails; e != nil {
		tb.Fatalf("javascript: %s %s", e.Text, e.Exception.Description)
	}
	if res != nil {
		require.NoError(tb, json.Unmarshal(out.Result.Value, res), "javascript value %s", out.Result.Value)
	}
}

// open loads url in a viewport width px wide and waits for the page's
// script to say it rendered, without error.
func (b *browser) open(tb testing.TB, url string, width int) {
	tb.Helper()
	b.call(tb, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": false}, nil)
	b.call(tb, "Page.navigate", map[string]any{"url": url}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var state struct{ Rendered, Error, URL string }
		b.eval(tb, `(d => ({Rendered: d && d.getAttribute("data-rendered") || "", Error: d && d.getAttribute("data-error") || "",
			URL: location.href}))(document.documentElement)`, &state)
		if state.Rendered == "ok" && state.URL == url {
			require.Empty(tb, state.Error, "the page's script reports an error")
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("%s did not render: %+v", url, state)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// screenshot saves the whole page (up to 8000 px of it) as a PNG.
func (b *browser) screenshot(tb testing.TB, path string) {
	tb.Helper()
	var size struct{ W, H float64 }
	b.eval(tb, `({W: document.documentElement.clientWidth, H: Math.min(document.documentElement.scrollHeight, 8000)})`, &size)
	var shot struct{ Data string }
	b.call(tb, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": size.W, "height": size.H, "scale": 1}}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	require.NoError(tb, err)
	require.NoError(tb, os.WriteFile(path, png, 0o644))
}

func (b *browser) mouse(tb testing.TB, typ string, x, y float64, buttons int) {
	tb.Helper()
	b.call(tb, "Input.dispatchMouseEvent", map[string]any{"type": typ, "x": x, "y": y, "button": "left",
		"buttons": buttons, "clickCount": 1}, nil)
}

// click presses and releases the left button at (x, y) in the viewport.
func (b *browser) click(tb testing.TB, x, y float64) {
	tb.Helper()
	b.mouse(tb, "mouseMoved", x, y, 0)
	b.mouse(tb, "mousePressed", x, y, 1)
	b.mouse(tb, "mouseReleased", x, y, 0)
}

// drag presses at (x0, y), moves to (x1, y) in steps and releases there.
func (b *browser) drag(tb testing.TB, x0, x1, y float64) {
	tb.Helper()
	b.mouse(tb, "mouseMoved", x0, y, 0)
	b.mouse(tb, "mousePressed", x0, y, 1)
	for i := 1; i <= 5; i++ {
		b.mouse(tb, "mouseMoved", x0+(x1-x0)*float64(i)/5, y, 1)
	}
	b.mouse(tb, "mouseReleased", x1, y, 0)
}
