package report

import (
	"bufio"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/units"
)

// report.html is one self-contained page: the CSS, the SVG charts and a
// small plain script (html/report.js) are inline, and its
// Content-Security-Policy forbids loading anything else, so it reads the
// same from an artifact store with no network. Every string that came from
// the target (commands, symbols, file names, library paths) reaches the
// page through html/template, which escapes it for the context it lands in
// (text, attribute, SVG <title>); the script reads names back from data
// attributes and writes them as text, never as markup.
//
// Everything is drawn in Go; the script only explores what is there: it
// zooms an icicle into a frame and searches its frames, and zooms the
// timelines into a span selected with the mouse. Figures read in human
// units with the exact bytes on hover (report.json has them all). The
// layout is checked in headless Chromium at 1400 and 800 px
// (html_browser_test.go).
//
// Size does not grow with the number of events: the analysis keeps at most
// Options.TimelinePoints points per timeline, charts bin those into
// chartBins columns, stack tables list at most htmlTopStacks rows and the
// icicle at most flameMaxNodes frames. A 60 s run and a 10 h run of the same
// program give pages of about the same size.

//go:embed html/report.tmpl html/style.css html/report.js
var htmlFiles embed.FS

// htmlTopStacks is how many stacks a table of report.html lists before "n
// more": the rest are in report.json and the profile.
const htmlTopStacks = 20

// htmlScript is the page's one script (html/report.js): it marks on <html>
// that the page rendered (data-rendered, data-charts) and any error or
// blocked load (data-error), so a headless browser's DOM dump says whether
// the page worked; and it makes the icicles and timelines explorable (zoom,
// search, select a range). Its hash is in the page's CSP; no other script
// may run.
var htmlScript = func() string {
	b, err := htmlFiles.ReadFile("html/report.js")
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return string(b)
}()

// htmlCSP is the page's Content-Security-Policy: nothing is fetched, only
// the inline style and htmlScript run.
var htmlCSP = func() string {
	sum := sha256.Sum256([]byte(htmlScript))
	return "default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-" +
		base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

var htmlTemplate = template.Must(template.New("report.tmpl").Funcs(template.FuncMap{
	"bytes": htmlBytes,
	"num":   func(n uint64) string { return strconv.FormatUint(n, 10) },
	"add1":  func(i int) int { return i + 1 },
	"join":  func(s []string, sep string) string { return strings.Join(s, sep) },
}).ParseFS(htmlFiles, "html/report.tmpl"))

var htmlStyle = func() template.CSS {
	b, err := htmlFiles.ReadFile("html/style.css")
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return template.CSS(b)
}()

// htmlBytes renders a byte count for people: human units, the exact
// bytes on hover (report.json has them too). Only digits and units: safe to
// mark as HTML.
func htmlBytes(n uint64) template.HTML {
	return template.HTML(fmt.Sprintf(`<span class="b" title="%d bytes">%s</span>`, n, units.Bytes(n)))
}

// bytesText renders a byte count in a sentence or a tooltip: human units
// first, the exact bytes after them.
func bytesText(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%s (%d bytes)", units.Bytes(n), n)
}

// Sentences shared with the text outputs say "1006632960 bytes (960.00
// MiB)": exact first, as a terminal or a diff wants. The page turns them
// around (humanFirst) so that people read the human units first.
var (
	// exactThenHuman is "N bytes (H" with H a unit figure: the sign, N, H.
	exactThenHuman = regexp.MustCompile(`([+-]?)(\d+) bytes \((\d+(?:\.\d+)? (?:B|[KMGTPE]iB))`)
	// bareExact is "N bytes" not after a "(" (where humanFirst put it):
	// what precedes, N, and a " (" that follows.
	bareExact = regexp.MustCompile(`(^|[^(\d])(\d{4,}) bytes( \()?`)
)

// humanFirst rewrites a sentence's byte counts for the page: "1006632960
// bytes (960.00 MiB, 12% of...)" reads "960.00 MiB (1006632960 bytes, 12%
// of...)", and a bare "335544320 bytes" reads "320.00 MiB (335544320
// bytes)". Counts under 1 KiB stay as they are.
func humanFirst(s string) string {
	s = exactThenHuman.ReplaceAllString(s, "$1$3 ($2 bytes")
	return bareExact.ReplaceAllStringFunc(s, func(m string) string {
		g := bareExact.FindStringSubmatch(m)
		n, err := strconv.ParseUint(g[2], 10, 64)
		if err != nil || n < 1024 {
			return m
		}
		if g[3] != "" { // "N bytes (30.8% of..."
			return g[1] + units.Bytes(n) + " (" + g[2] + " bytes, "
		}
		return g[1] + units.Bytes(n) + " (" + g[2] + " bytes)"
	})
}

// humanFirstAll is humanFirst on each of ss, in a new slice.
func humanFirstAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = humanFirst(s)
	}
	return out
}

// htmlPage is everything the template shows, computed in Go so that the
// template only lays it out.
type htmlPage struct {
	Title  string
	CSP    string
	Style  template.CSS
	Script template.JS

	Run      htmlRun
	Headline []htmlFact
	Blocks   *analysis.Totals
	Charts   []*chart
	Findings []htmlFinding
	Flames   []*flame
	Leaks    []htmlLeak
	Devices  []htmlDevice
	// NVMLColumns shows the devices' NVML columns: some device was sampled.
	NVMLColumns bool
	Processes   []htmlProcess
	// Tests are the pytest tests' figures; nil when the recording shows
	// no pytest test.
	Tests     *htmlTests
	Failures  []htmlFailure
	Books     *analysis.Books
	Host      *analysis.Totals
	VMM       *analysis.VMM
	Libraries []event.Library
}

// htmlFact is one labelled figure of the header.
type htmlFact struct {
	Label string
	Value template.HTML // from htmlBytes or plain digits
	Note  string
	Warn  bool
}

// htmlRun is the run's facts, rendered.
type htmlRun struct {
	Command   string
	Mode      string
	Tool      string
	Host      string
	PID       string
	Started   string
	Duration  string
	End       string
	CutShort  bool
	Events    uint64
	Nested    uint64
	Lost      uint64
	NVML      string
	NVMLNotes []string // NVML.Notes
	Python    []string // interpreterLines
	DeviceSw  uint64
	Inferred  uint64
	Libraries int
	Processes int
	NoCalls   string   // noCallsLine
	Stripped  []string // strippedRuntimeLines
	Moment    string   // momentLine: a moment report's
	// Incomplete is incompleteLine: why the figures do not cover the
	// whole recording.
	Incomplete string
	Flight     string // flightLine: a flight recorder's window
}

// htmlFinding is one finding with its evidence.
type htmlFinding struct {
	N           int
	Kind        string
	Severity    string
	Summary     string
	Bytes       uint64
	When        string
	PID         string
	Remediation []string
	Stacks      []analysis.FindingStack
	Windows     []htmlWindow
	// WindowGrowth is the windows' growth (windowsText); Rate the growth's
	// rate under the projection rule (growthRate).
	WindowGrowth string
	Rate         string
}

// htmlWindow is one window of a leak's evidence.
type htmlWindow struct {
	End  string
	Live uint64
}

// htmlLeak is one row of the leak table.
type htmlLeak struct {
	N         int
	PID       string
	Site      string
	Frames    []string
	Growth    uint64
	Rate      string
	LiveAtEnd uint64
	Count     uint64
	Spark     *sparkline
}

// htmlDevice is one row of the devices table.
type htmlDevice struct {
	Name        string
	Product     string
	UUID        string
	Peak        uint64
	PeakAt      string
	LiveAtEnd   uint64
	Capacity    uint64
	NVMLSamples uint64
	NVMLAtPeak  template.HTML // bytesAt
	NVMLMax     template.HTML
}

// bytesAt renders bytes at a time: "960.00 MiB at +1.41 s", the exact bytes
// on hover.
func bytesAt(res *analysis.Result, b, t uint64) template.HTML {
	return htmlBytes(b) + template.HTML(" at "+template.HTMLEscapeString(secs(res, t)))
}

// htmlProcess is one row of the processes table.
type htmlProcess struct {
	Label       string
	PID, PPID   string
	Command     string
	Exe         string
	Started     string
	Ended       string
	Peak        uint64
	PeakAt      string
	LiveAtEnd   uint64
	Allocs      uint64
	Frees       uint64
	Failed      uint64
	Unknown     uint64
	HostPeak    uint64
	NVML        string
	Preexisting string
	// Loop describes the process's training loop; "" without one.
	Loop string
}

// htmlFailure is a process's failed allocations.
type htmlFailure struct {
	Label string
	Count uint64
	Bytes uint64
	First string
	Sites []htmlSite
	More  int
}

// htmlSite is a stack's figures in a table.
type htmlSite struct {
	Site   string
	Frames []string
	Bytes  uint64
	Count  uint64
}

// WriteHTML writes report.html for res: the run's facts (lost events
// always), a timeline chart per device and pinned host memory, the findings
// with their evidence and remediation, an icicle of the stacks live at each
// process's peak, the leak table, devices, processes, failed allocations,
// the API books, pinned host memory, VMM and the libraries probed. The page
// is self-contained and deterministic: the same Result gives the same bytes.
func WriteHTML(w io.Writer, res *analysis.Result) error {
	return writeHTML(w, &Report{Result: res})
}

// writeHTML is WriteHTML for a Report: its tests after the processes.
func writeHTML(w io.Writer, r *Report) error {
	if r.Result == nil {
		return ErrNilResult
	}
	pg := newHTMLPage(r.Result)
	pg.Tests = newHTMLTests(r)
	bw := bufio.NewWriter(w)
	if err := htmlTemplate.Execute(bw, pg); err != nil {
		return fmt.Errorf("write report.html: %w", err)
	}
	return bw.Flush()
}

func newHTMLPage(res *analysis.Result) *htmlPage {
	run := res.Run
	t := res.Totals
	pg := &htmlPage{CSP: htmlCSP, Style: htmlStyle, Script: template.JS(htmlScript), Blocks: res.Blocks,
		Libraries: run.Libraries}
	cmd := strings.Join(run.Command, " ")
	if cmd == "" {
		cmd = "pid " + run.PIDText(run.PID)
	}
	pg.Title = "vramprof: " + cmd
	pg.Run = htmlRun{Command: cmd, Mode: run.Mode, Tool: run.Tool, Host: run.Host, PID: run.PIDText(run.PID),
		Duration: durationText(&run), Events: run.Events, Nested: run.NestedEvents,
		Lost: res.LostEvents, NVML: nvmlLine(res), NVMLNotes: nvmlNotes(res), DeviceSw: run.DeviceSwitches, Inferred: run.DevicesInferred,
		Libraries: len(run.Libraries), Processes: len(res.Processes), Python: interpreterLines(&run),
		NoCalls: noCallsLine(&run), Stripped: strippedRuntimeLines(&run), Moment: humanFirst(momentLine(res, atOffset)),
		Flight: humanFirst(flightLine(res, atOffset)), Incomplete: humanFirst(incompleteLine(res, atOffset))}
	if pg.Run.Mode == "" {
		pg.Run.Mode = "unknown"
	}
	if run.WallTime != 0 {
		pg.Run.Started = time.Unix(0, run.WallTime).UTC().Format("2006-01-02 15:04:05 UTC")
	}
	if run.Ended {
		pg.Run.End = endText(&run)
	} else {
		pg.Run.End = "cut short (no end record): the figures cover what was recorded"
		pg.Run.CutShort = true
	}

	lost := htmlFact{Label: "lost events", Value: template.HTML(strconv.FormatUint(res.LostEvents, 10)),
		Note: "every record delivered"}
	if res.LostEvents > 0 {
		lost.Note, lost.Warn = lostCause(res)+": the figures may be wrong either way (a missed free reads high, a missed allocation low)", true
	}
	if res.LateEvents > 0 {
		lost.Note += fmt.Sprintf("; %d events late (after the reorder window): may be misordered against calls on the same address", res.LateEvents)
		lost.Warn = true
	}
	failed := htmlFact{Label: "failed allocations", Value: template.HTML(strconv.FormatUint(t.FailedAllocations, 10)),
		Note: units.Bytes(t.FailedBytes) + " requested", Warn: t.FailedAllocations > 0}
	pg.Headline = []htmlFact{
		{Label: "peak", Value: htmlBytes(t.PeakBytes), Note: "at " + secs(res, t.PeakTime)},
		{Label: "live at end", Value: htmlBytes(t.LiveBytesAtEnd), Note: fmt.Sprintf("in %d allocations", t.LiveAllocationsAtEnd)},
		{Label: "allocated", Value: htmlBytes(t.AllocatedBytes), Note: fmt.Sprintf("%d allocations, %d frees", t.Allocations, t.Frees)},
		failed,
		lost,
	}

	pg.Charts = timelineCharts(res)
	pg.Findings, pg.Leaks = htmlFindings(res)
	for i := range res.Processes {
		if f := newFlame(res, &res.Processes[i]); f != nil {
			pg.Flames = append(pg.Flames, f)
		}
	}
	pg.Devices = htmlDevices(res)
	for _, d := range res.Devices {
		pg.NVMLColumns = pg.NVMLColumns || d.NVML != nil
	}
	pg.Processes, pg.Failures = htmlProcesses(res)
	if b := res.Books; b.Runtime.Calls() > 0 || b.Driver.Calls() > 0 {
		pg.Books = &res.Books
	}
	if h := res.Host; h.Allocations > 0 || h.FailedAllocations > 0 || h.UnknownFrees > 0 {
		pg.Host = &res.Host
	}
	pg.VMM = res.VMM
	return pg
}

func htmlFindings(res *analysis.Result) ([]htmlFinding, []htmlLeak) {
	var fs []htmlFinding
	var leaks []htmlLeak
	for i, f := range wordFindings(res) {
		hf := htmlFinding{N: i + 1, Kind: f.Kind, Severity: string(f.Severity), Summary: humanFirst(f.Summary), Bytes: f.Bytes,
			When: secs(res, f.Time), PID: res.Run.PIDText(f.PID), Remediation: humanFirstAll(f.Remediation), Stacks: f.Stacks}
		if l := f.Leak; l != nil {
			for k, e := range l.WindowEnds {
				if k < len(l.Live) {
					hf.Windows = append(hf.Windows, htmlWindow{End: secs(res, e), Live: l.Live[k]})
				}
			}
			hf.Rate = growthRate(l)
			hf.WindowGrowth = humanFirst(windowsText(res, l))
			if f.Kind != analysis.KindLeak {
				// Pinned host growth: host memory, not a device leak.
				fs = append(fs, hf)
				continue
			}
			hl := htmlLeak{N: i + 1, PID: res.Run.PIDText(f.PID), Growth: f.Bytes, Rate: hf.Rate, Site: analysis.NoStack,
				Spark: newSparkline(l.Live)}
			if len(l.Live) > 0 {
				hl.LiveAtEnd = l.Live[len(l.Live)-1]
			}
			if len(f.Stacks) > 0 {
				hl.Site, hl.Frames, hl.Count = f.Stacks[0].Site, f.Stacks[0].Frames, f.Stacks[0].Count
			}
			leaks = append(leaks, hl)
		}
		fs = append(fs, hf)
	}
	return fs, leaks
}

// rate renders bytes per second exactly (to the byte) with human units.
func htmlDevices(res *analysis.Result) []htmlDevice {
	var out []htmlDevice
	for _, d := range res.Devices {
		hd := htmlDevice{Name: analysis.DeviceName(d.Index), Product: d.Name, UUID: d.UUID, Peak: d.PeakBytes,
			PeakAt: secs(res, d.PeakTime), LiveAtEnd: d.LiveBytesAtEnd, Capacity: d.CapacityBytes}
		if n := d.NVML; n != nil {
			hd.NVMLSamples = n.Samples
			if at := n.AtPeak; at != nil {
				hd.NVMLAtPeak = bytesAt(res, at.UsedBytes, at.Time)
			}
			hd.NVMLMax = bytesAt(res, n.Max.UsedBytes, n.Max.Time)
		}
		out = append(out, hd)
	}
	return out
}

func htmlProcesses(res *analysis.Result) ([]htmlProcess, []htmlFailure) {
	var procs []htmlProcess
	var fails []htmlFailure
	for i := range res.Processes {
		p := &res.Processes[i]
		hp := htmlProcess{Label: procLabel(res, p), PID: res.Run.PIDText(p.PID), PPID: ppidText(res, p.PPID), Command: strings.Join(p.Command, " "),
			Exe: p.Exe, Started: secs(res, p.Start), Peak: p.Totals.PeakBytes, PeakAt: secs(res, p.PeakTime),
			LiveAtEnd: p.Totals.LiveBytesAtEnd, Allocs: p.Totals.Allocations, Frees: p.Totals.Frees,
			Failed: p.Totals.FailedAllocations, Unknown: p.Totals.UnknownFrees, HostPeak: p.Host.PeakBytes,
			Preexisting: humanFirst(preexistingText(res, p)), Loop: humanFirst(iterationText(p))}
		if p.SupersededAt != 0 {
			hp.Ended = "ended by " + secs(res, p.SupersededAt) + " (its PID taken by a later process)"
		}
		if n := p.NVML; n != nil {
			hp.NVML = humanFirst(gapText(n.Latest)) + " at " + secs(res, n.Latest.Time)
		} else if p.NVMLAbsent != "" {
			hp.NVML = "no NVML figure: " + p.NVMLAbsent
		}
		procs = append(procs, hp)
		ff := p.FirstFailure
		if ff == nil {
			continue
		}
		hf := htmlFailure{Label: procLabel(res, p), Count: p.Totals.FailedAllocations, Bytes: p.Totals.FailedBytes,
			First: fmt.Sprintf("asked for %s at %s on device %s at %s and returned %s, with %s live in the process, %s on that device",
				bytesText(ff.Size), res.Site(ff.Stack), analysis.DeviceName(ff.Device), secs(res, ff.Time),
				analysis.ErrorName(ff.API, ff.Ret), bytesText(ff.LiveBytes), bytesText(ff.DeviceLiveBytes))}
		hf.Sites, hf.More = htmlSites(res, p.Failed)
		fails = append(fails, hf)
	}
	return procs, fails
}

func htmlSites(res *analysis.Result, us []analysis.StackUsage) ([]htmlSite, int) {
	var out []htmlSite
	for i, u := range us {
		if i == htmlTopStacks {
			return out, len(us) - i
		}
		out = append(out, htmlSite{Site: res.Site(u.Stack), Frames: res.Lines(u.Stack), Bytes: u.Bytes, Count: u.Count})
	}
	return out, 0
}
