package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/units"
)

// Timeline charts of report.html: live bytes over time, one chart per device
// (device and physical memory, every process) and one for pinned host
// memory. The geometry is computed here and laid out by the template, which
// escapes every label.

// Chart geometry, in SVG user units (the SVG scales to the page's width).
const (
	chartW      = 1000
	chartH      = 260
	chartLeft   = 76 // room for the byte axis labels
	chartRight  = 36 // room for the last time label, centred on the plot's edge
	chartTop    = 22 // room for marker labels
	chartBottom = 32 // room for the time axis labels, clear of the byte axis's 0
	// chartBins is how many columns a series is binned into: one per two
	// units of plot width, so a band never needs more points than the
	// chart has pixels, whatever the timeline holds.
	chartBins = (chartW - chartLeft - chartRight) / 2
)

// chartColors tell processes apart, in the Result's process order.
var chartColors = []string{"#2563eb", "#d97706", "#059669", "#7c3aed", "#db2777", "#0891b2", "#65a30d", "#9f1239"}

// chart is one SVG timeline. The page's script zooms it to a range
// selected with the mouse: the plot's contents sit in a nested <svg> whose
// viewBox it narrows, the marks (data-x) move along and the time axis is
// drawn again from T0 and T1.
type chart struct {
	Title   string
	Caption string
	W, H    int
	// T0 and T1 are the times, in ns since the run's start, at the time
	// axis's ends.
	T0, T1 uint64
	Plot   rect
	// Right and Bottom are the plot's right and bottom edges.
	Right, Bottom string
	XTicks        []tick
	YTicks        []tick
	Series        []*series
	Marks         []mark
	Regions       []region
	// Iterations shade every other iteration of the processes' loops;
	// IterNotes describe them in the legend.
	Iterations []iterBand
	IterNotes  []string
	Notes      []string
}

// iterBand is one process's shaded iterations: one SVG path of rectangles.
type iterBand struct {
	Path  string
	Title string
}

// rect is a rectangle in SVG units.
type rect struct{ X, Y, W, H string }

// tick is an axis tick: its position along the axis and its label.
type tick struct {
	Pos   string
	Label string
}

// series is one timeline drawn as a band (each bin's lowest to highest live
// bytes) under a line through the highest.
type series struct {
	Label  string
	Color  string
	Dashed bool
	Band   string // SVG path: the min-max band, closed
	Line   string // SVG path: the top of the band
	Max    uint64
}

// mark is a point of interest: the peak, an OOM, NVML samples, a finding.
type mark struct {
	Kind   string // "peak", "oom", "nvml", "finding": the CSS class
	X, Y   string
	Label  string
	LabelX string
	LabelY string
	Anchor string // text-anchor of the label
	Title  string // the tooltip
	Rule   bool   // draw a vertical rule through the plot at X
	Glyph  string // SVG path of the marker: a cross for an OOM, a diamond for NVML
	x      float64
}

// region shades a span of time: the span a leak grew over.
type region struct {
	X, W   string
	Label  string
	LabelX string
	LabelY string
	Anchor string
	Title  string
	x0, x1 float64
}

// f1 renders a coordinate with one decimal: enough for the eye, and the
// same bytes on every machine.
func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// scale maps run time and bytes onto the plot area of a chart.
type scale struct {
	t0, dur uint64 // the time axis, in ns from the run's start: t0 to dur
	ymax    uint64
	h       int // the chart's height
}

func (s scale) x(rel uint64) float64 {
	pw := float64(chartW - chartLeft - chartRight)
	if rel <= s.t0 {
		return chartLeft
	}
	return chartLeft + pw*math.Min(float64(rel-s.t0)/float64(s.dur-s.t0), 1)
}

func (s scale) y(b uint64) float64 {
	ph := float64(s.h - chartTop - chartBottom)
	return float64(s.h-chartBottom) - ph*math.Min(float64(b)/float64(s.ymax), 1)
}

// bin is the column of time rel, out of n.
func (s scale) bin(rel uint64, n int) int {
	if rel <= s.t0 {
		return 0
	}
	return min(int(float64(rel-s.t0)/float64(s.dur-s.t0)*float64(n)), n-1)
}

// axisStart is where the time axis starts: at 0, unless nothing was live
// through the first fifth of the run or more (a Python import before the
// first allocation; an OOM moment a second in, its allocations in its last
// milliseconds). Then the axis starts at a round time at or before the
// first point of any timeline (or NVML sample drawn), so that what happened
// fills the chart; nothing traced is left out, as nothing traced was live
// before. The caption says so.
func axisStart(res *analysis.Result, dur uint64) uint64 {
	first := uint64(math.MaxUint64)
	for _, tl := range res.Timelines {
		if len(tl.Points) > 0 {
			first = min(first, res.Rel(tl.Points[0].Time))
		}
	}
	for _, d := range res.Devices { // the NVML samples drawn
		if n := d.NVML; n != nil {
			first = min(first, res.Rel(n.Max.Time), res.Rel(n.Last.Time))
			if n.AtPeak != nil {
				first = min(first, res.Rel(n.AtPeak.Time))
			}
		}
	}
	if first == math.MaxUint64 || first < dur/5 {
		return 0
	}
	step := max(uint64(niceStep(float64(dur-first), 10)), 1)
	return first - first%step
}

// seriesKey groups timelines drawn as one series.
type seriesKey struct {
	pid   uint32
	start uint64
	layer event.Layer
}

// timelineCharts builds one chart per device that has device-memory
// timelines (or NVML samples), and one for pinned host memory when traced.
func timelineCharts(res *analysis.Result) []*chart {
	dur := res.Run.Duration
	for _, tl := range res.Timelines {
		if n := len(tl.Points); n > 0 {
			dur = max(dur, res.Rel(tl.Points[n-1].Time))
		}
	}
	dur = max(dur, 1)
	t0 := axisStart(res, dur)
	hasBlock := slices.ContainsFunc(res.Timelines, func(tl analysis.Timeline) bool { return tl.Layer == event.LayerBlock })

	var charts []*chart
	for _, d := range res.Devices {
		var tls []analysis.Timeline
		for _, tl := range res.Timelines {
			if tl.Space != analysis.SpaceHost && tl.Device == d.Index {
				tls = append(tls, tl)
			}
		}
		if len(tls) == 0 && d.NVML == nil {
			continue
		}
		title := "Device " + analysis.DeviceName(d.Index)
		if d.Name != "" {
			title += ": " + d.Name
		}
		c := newChart(res, title, tls, t0, dur, hasBlock, &d)
		c.Caption = fmt.Sprintf("Live device memory (allocations and physical memory) over %s; peak %s at %s",
			units.Duration(dur), units.Bytes(d.PeakBytes), secs(res, d.PeakTime))
		if d.CapacityBytes > 0 {
			c.Caption += " of " + units.Bytes(d.CapacityBytes) + " capacity"
		}
		c.Caption += "." + leadInText(t0)
		charts = append(charts, c)
		charts = append(charts, leakCharts(res, t0, dur, d.Index)...)
	}
	var host []analysis.Timeline
	for _, tl := range res.Timelines {
		if tl.Space == analysis.SpaceHost {
			host = append(host, tl)
		}
	}
	if len(host) > 0 {
		c := newChart(res, "Pinned host memory", host, t0, dur, false, nil)
		c.Caption = fmt.Sprintf("Live pinned host memory (not device memory); peak %s at %s.",
			units.Bytes(res.Host.PeakBytes), secs(res, res.Host.PeakTime)) + leadInText(t0)
		charts = append(charts, c)
	}
	return charts
}

// newChart draws tls (one device's, or pinned host memory's) on one chart.
// dev is nil for the host chart; otherwise its peak, its NVML samples and
// the OOMs and findings on it are marked.
func newChart(res *analysis.Result, title string, tls []analysis.Timeline, t0, dur uint64, hasBlock bool, dev *analysis.Device) *chart {
	// Group by process instance and layer: a host chart merges a process's
	// devices into one series.
	var keys []seriesKey
	groups := map[seriesKey][]analysis.Timeline{}
	for _, tl := range tls {
		k := seriesKey{tl.PID, tl.ProcessStart, tl.Layer}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], tl)
	}
	var ymax uint64
	for _, tl := range tls {
		for _, p := range tl.Points {
			ymax = max(ymax, p.Bytes)
		}
	}
	if dev != nil {
		ymax = max(ymax, dev.PeakBytes)
		if n := dev.NVML; n != nil {
			ymax = max(ymax, n.Max.UsedBytes)
		}
	}
	c, sc := newAxes(title, chartH, t0, dur, ymax)

	for _, k := range keys {
		endRel := res.Run.Duration
		p := findProcess(res, k.pid, k.start)
		if p != nil && p.SupersededAt != 0 {
			endRel = res.Rel(p.SupersededAt)
		}
		s := newSeries(res, groups[k], sc, endRel, seriesEnd(p, k.layer, dev))
		// A process has the same color on every chart.
		s.Color = chartColors[processIndex(res, k.pid, k.start)%len(chartColors)]
		s.Label = procLabel(res, &analysis.Process{PID: k.pid, Start: k.start})
		if p != nil && len(p.Command) > 0 {
			s.Label += " " + strings.Join(p.Command, " ")
		}
		if hasBlock {
			if k.layer == event.LayerBlock {
				s.Label += ": allocated (block layer)"
				s.Dashed = true
			} else {
				s.Label += ": reserved (segment layer)"
			}
		}
		c.Series = append(c.Series, s)
	}
	if dev == nil {
		if res.Host.PeakBytes > 0 {
			c.Marks = append(c.Marks, peakMark(sc, res, res.Host.PeakTime, res.Host.PeakBytes, "host peak"))
		}
		placeLabels(c)
		return c
	}
	if dev.PeakBytes > 0 {
		c.Marks = append(c.Marks, peakMark(sc, res, dev.PeakTime, dev.PeakBytes, "peak"))
	}
	c.Marks = append(c.Marks, oomMarks(res, sc, dev.Index)...)
	c.Marks = append(c.Marks, nvmlMarks(res, sc, dev)...)
	c.Iterations, c.IterNotes = iterationBands(res, sc, keys)
	regions, marks := findingMarks(res, sc, dev.Index)
	c.Regions, c.Marks = regions, append(c.Marks, marks...)
	if dev.NVML != nil && res.NVML != nil && res.NVML.Available {
		c.Notes = append(c.Notes, fmt.Sprintf("NVML (diamonds) counts every process's memory and the driver's on the device: %d samples; shown at the traced peak, at its maximum and last.", dev.NVML.Samples))
	}
	placeLabels(c)
	return c
}

// newAxes starts a chart h units high whose time axis spans t0 to dur and
// whose byte axis holds ymax.
func newAxes(title string, h int, t0, dur, ymax uint64) (*chart, scale) {
	ymax, yTicks := byteTicks(ymax)
	sc := scale{t0: t0, dur: dur, ymax: ymax, h: h}
	c := &chart{Title: title, W: chartW, H: h, T0: t0, T1: dur, Right: f1(chartW - chartRight), Bottom: f1(float64(h - chartBottom)),
		Plot: rect{X: f1(chartLeft), Y: f1(chartTop), W: f1(chartW - chartLeft - chartRight), H: f1(float64(h - chartTop - chartBottom))}}
	for _, yt := range yTicks {
		c.YTicks = append(c.YTicks, tick{Pos: f1(sc.y(yt.v)), Label: yt.label})
	}
	for _, xt := range timeTicks(t0, dur) {
		c.XTicks = append(c.XTicks, tick{Pos: f1(sc.x(xt.v)), Label: xt.label})
	}
	return c, sc
}

// leadInText says, in a caption, where the time axis starts when not at 0.
func leadInText(t0 uint64) string {
	if t0 == 0 {
		return ""
	}
	return " The axis starts at " + units.Offset(t0) + ": nothing traced was live before."
}

// seriesEnd is what a series ends at, when the Result says: a process's
// live bytes at its end on a device (segment layer), or its pinned host
// memory (all devices: dev nil).
func seriesEnd(p *analysis.Process, layer event.Layer, dev *analysis.Device) *uint64 {
	switch {
	case p == nil || layer != event.LayerSegment:
		return nil
	case dev == nil:
		return &p.Host.LiveBytesAtEnd
	}
	for _, d := range p.Devices {
		if d.Index == dev.Index {
			return &d.LiveBytesAtEnd
		}
	}
	return nil
}

func processIndex(res *analysis.Result, pid uint32, start uint64) int {
	for i := range res.Processes {
		if p := &res.Processes[i]; p.PID == pid && p.Start == start {
			return i
		}
	}
	return len(res.Processes)
}

func findProcess(res *analysis.Result, pid uint32, start uint64) *analysis.Process {
	for i := range res.Processes {
		if p := &res.Processes[i]; p.PID == pid && p.Start == start {
			return p
		}
	}
	return nil
}

// newSeries bins a step function (live bytes hold until the next point, and
// after the last until endRel) into chartBins columns: each column's band
// spans the lowest and highest value it saw, so a short spike stays visible
// however long the run. Several timelines (a host chart's devices) are
// summed.
//
// A timeline keeps each bucket's lowest and highest value, not its last:
// after the last point the series would hold whichever came later. When
// endVal is known (the process's live bytes at its end), the series holds
// that instead.
func newSeries(res *analysis.Result, tls []analysis.Timeline, sc scale, endRel uint64, endVal *uint64) *series {
	type pt struct {
		t   uint64
		i   int
		val uint64
	}
	var pts []pt
	for i, tl := range tls {
		for _, p := range tl.Points {
			pts = append(pts, pt{res.Rel(p.Time), i, p.Bytes})
		}
	}
	if len(pts) == 0 {
		return &series{}
	}
	slices.SortStableFunc(pts, func(a, b pt) int { return cmp.Compare(a.t, b.t) })
	bin := func(rel uint64) int { return sc.bin(rel, chartBins) }
	first, last := bin(pts[0].t), max(bin(pts[len(pts)-1].t), bin(endRel))
	lo, hi := make([]uint64, chartBins), make([]uint64, chartBins)
	cur := make([]uint64, len(tls))
	var sum, top uint64
	j := 0
	for b := first; b <= last; b++ {
		// The value carried in from the previous bin counts, except
		// before the series' first point.
		lo[b], hi[b] = sum, sum
		fresh := b == first
		for ; j < len(pts) && bin(pts[j].t) == b; j++ {
			sum = sum - cur[pts[j].i] + pts[j].val
			cur[pts[j].i] = pts[j].val
			if fresh {
				lo[b], hi[b], fresh = sum, sum, false
			}
			lo[b], hi[b] = min(lo[b], sum), max(hi[b], sum)
			top = max(top, sum)
		}
		if j == len(pts) && endVal != nil && sum != *endVal {
			sum = *endVal
			lo[b], hi[b] = min(lo[b], sum), max(hi[b], sum)
		}
	}
	pw := float64(chartW-chartLeft-chartRight) / chartBins
	x := func(b int) string { return f1(chartLeft + pw*float64(b)) }
	// Steps: a horizontal run per value, a vertical edge where it changes.
	steps := func(w *strings.Builder, vals []uint64, from, to, dir int) {
		y := f1(sc.y(vals[from]))
		fmt.Fprintf(w, "V%s", y)
		for b := from + dir; b != to+dir; b += dir {
			if ny := f1(sc.y(vals[b])); ny != y {
				edge := b
				if dir < 0 {
					edge = b + 1
				}
				fmt.Fprintf(w, "H%sV%s", x(edge), ny)
				y = ny
			}
		}
		end := to + 1
		if dir < 0 {
			end = to
		}
		fmt.Fprintf(w, "H%s", x(end))
	}
	var band, line strings.Builder
	fmt.Fprintf(&line, "M%s %s", x(first), f1(sc.y(hi[first])))
	steps(&line, hi, first, last, 1)
	fmt.Fprintf(&band, "M%s %s", x(first), f1(sc.y(hi[first])))
	steps(&band, hi, first, last, 1)
	steps(&band, lo, last, first, -1)
	band.WriteString("Z")
	return &series{Band: band.String(), Line: line.String(), Max: top}
}

// placeLabel puts a marker's label beside it, inside the chart.
func placeLabel(m *mark, x, y float64) {
	m.X, m.Y, m.x = f1(x), f1(y), x
	switch m.Kind {
	case "oom":
		m.Glyph = fmt.Sprintf("M%s %sL%s %sM%s %sL%s %s", f1(x-5), f1(y-5), f1(x+5), f1(y+5), f1(x-5), f1(y+5), f1(x+5), f1(y-5))
	case "nvml":
		m.Glyph = fmt.Sprintf("M%s %sL%s %sL%s %sL%s %sZ", f1(x), f1(y-6), f1(x+6), f1(y), f1(x), f1(y+6), f1(x-6), f1(y))
	}
	m.LabelY = f1(max(y-8, chartTop-6))
	m.LabelX, m.Anchor = f1(x+6), "start"
}

func peakMark(sc scale, res *analysis.Result, t, b uint64, what string) mark {
	m := mark{Kind: "peak", Label: what + " " + units.Bytes(b),
		Title: fmt.Sprintf("%s: %s at %s", what, bytesText(b), secs(res, t))}
	placeLabel(&m, sc.x(res.Rel(t)), sc.y(b))
	return m
}

// oomMarks marks each process's first allocation that ran out of memory
// on its device (other errors, such as no driver, are no OOM: the failed
// allocations section and the failed_call findings list them).
func oomMarks(res *analysis.Result, sc scale, dev int32) []mark {
	var out []mark
	for i := range res.Processes {
		p := &res.Processes[i]
		ff := p.FirstOOM
		if ff == nil || ff.Device != dev {
			continue
		}
		m := mark{Kind: "oom", Rule: true, Label: "OOM: " + units.Bytes(ff.Size) + " request",
			Title: fmt.Sprintf("%s: a request for %s at %s failed with %s at %s, %s live on the device (%d failed allocations in all)",
				procLabel(res, p), bytesText(ff.Size), res.Site(ff.Stack), analysis.ErrorName(ff.API, ff.Ret),
				secs(res, ff.Time), bytesText(ff.DeviceLiveBytes), p.Totals.FailedAllocations)}
		placeLabel(&m, sc.x(res.Rel(ff.Time)), sc.y(ff.DeviceLiveBytes))
		m.LabelY = f1(chartTop + 12)
		out = append(out, m)
	}
	return out
}

// nvmlMarks overlays the device's NVML samples that the Result keeps: at
// the traced peak, the maximum and the last.
func nvmlMarks(res *analysis.Result, sc scale, d *analysis.Device) []mark {
	n := d.NVML
	if n == nil {
		return nil
	}
	type sample struct {
		what string
		s    analysis.DeviceSample
	}
	samples := []sample{{"most NVML used", n.Max}, {"last NVML sample", n.Last}}
	if n.AtPeak != nil {
		samples = append([]sample{{"NVML at the traced peak", *n.AtPeak}}, samples...)
	}
	var out []mark
	seen := map[uint64]bool{}
	for _, s := range samples {
		if seen[s.s.Time] {
			continue
		}
		seen[s.s.Time] = true
		m := mark{Kind: "nvml", Title: fmt.Sprintf("%s: %s used of %s at %s, every process and the driver",
			s.what, bytesText(s.s.UsedBytes), bytesText(s.s.TotalBytes), secs(res, s.s.Time))}
		placeLabel(&m, sc.x(res.Rel(s.s.Time)), sc.y(s.s.UsedBytes))
		out = append(out, m)
	}
	return out
}

// minIterWidth is the narrowest iteration, in SVG units, worth shading:
// narrower bands would be noise, and the legend says so instead.
const minIterWidth = 4

// iterationBands shades every other iteration (the 1st, 3rd...) of the
// loop of each process drawn on the chart, from its start to the next one
// (the last to its start plus the period).
func iterationBands(res *analysis.Result, sc scale, keys []seriesKey) ([]iterBand, []string) {
	var bands []iterBand
	var notes []string
	seen := map[[2]uint64]bool{}
	for _, k := range keys {
		if seen[[2]uint64{uint64(k.pid), k.start}] {
			continue
		}
		seen[[2]uint64{uint64(k.pid), k.start}] = true
		p := findProcess(res, k.pid, k.start)
		if p == nil || p.Iterations == nil || len(p.Iterations.Starts) == 0 {
			continue
		}
		it := p.Iterations
		what := fmt.Sprintf("%s: %d iterations of %s, paced by the allocations at %s",
			procLabel(res, p), it.Count, units.Duration(it.PeriodNs), it.Site)
		if sc.x(res.Rel(it.Starts[0])+it.PeriodNs)-sc.x(res.Rel(it.Starts[0])) < minIterWidth {
			notes = append(notes, what+" (too many to shade)")
			continue
		}
		notes = append(notes, what+" (every other one shaded)")
		var b strings.Builder
		top, h := f1(chartTop), f1(float64(sc.h-chartTop-chartBottom))
		for i := 0; i < len(it.Starts); i += 2 {
			end := it.Starts[i] + it.PeriodNs
			if i+1 < len(it.Starts) {
				end = it.Starts[i+1]
			}
			x0, x1 := sc.x(res.Rel(it.Starts[i])), sc.x(res.Rel(end))
			fmt.Fprintf(&b, "M%s %sh%sv%sh-%sz", f1(x0), top, f1(max(x1-x0, 0.5)), h, f1(max(x1-x0, 0.5)))
		}
		bands = append(bands, iterBand{Path: b.String(), Title: what})
	}
	return bands, notes
}

// findingMarks marks the findings about memory on device dev: a leak shades
// the span its bytes grew over (the growth over the run: from its process's
// first traced moment to the end, Leak.From to Leak.To); other
// kinds but the peak and the OOM (marked already), a spike say, get a rule
// at their time. A finding is on a device when one of its stacks allocated
// there.
func findingMarks(res *analysis.Result, sc scale, dev int32) ([]region, []mark) {
	var regions []region
	var marks []mark
	for i, f := range wordFindings(res) {
		if f.Kind == analysis.KindPeak || f.Kind == analysis.KindOOM || !findingOnDevice(res, f.Finding, dev) {
			continue
		}
		label := fmt.Sprintf("#%d %s", i+1, f.Kind)
		if l := f.Leak; l != nil && l.To > l.From {
			x0 := sc.x(res.Rel(l.From))
			x1 := sc.x(res.Rel(l.To))
			regions = append(regions, region{X: f1(x0), W: f1(max(x1-x0, 1)), Label: label + " +" + units.Bytes(f.Bytes),
				Title: humanFirst(f.Summary), x0: x0, x1: x0 + max(x1-x0, 1)})
			continue
		}
		m := mark{Kind: "finding", Rule: true, Label: label, Title: humanFirst(f.Summary)}
		placeLabel(&m, sc.x(res.Rel(f.Time)), chartTop)
		m.LabelY = f1(chartTop + 24)
		marks = append(marks, m)
	}
	return regions, marks
}

func findingOnDevice(res *analysis.Result, f *analysis.Finding, dev int32) bool {
	for _, s := range f.Stacks {
		for _, c := range res.Classes {
			if c.PID == f.PID && c.ProcessStart == f.ProcessStart && c.Stack == s.Stack && c.Device == dev &&
				c.Space != analysis.SpaceHost {
				return true
			}
		}
	}
	return false
}

// axisTick is a tick before layout: its value and label.
type axisTick struct {
	v     uint64
	label string
}

// niceStep returns a step of 1, 2 or 5 times a power of ten that cuts span
// into at most n intervals.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// byteTicks picks the byte axis: a round top at or above ymax and ticks in
// the binary unit that suits it ("0", "512 MiB", "1 GiB"...).
func byteTicks(ymax uint64) (uint64, []axisTick) {
	if ymax == 0 {
		ymax = 1
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	u, ui := uint64(1), 0
	for ui < len(units)-1 && ymax/u >= 1024 {
		u *= 1024
		ui++
	}
	step := niceStep(float64(ymax)/float64(u), 5)
	var ticks []axisTick
	var top uint64
	for i := 0; ; i++ {
		v := float64(i) * step
		b := uint64(v * float64(u))
		dec := 0
		if step < 1 {
			dec = int(math.Ceil(-math.Log10(step)))
		}
		label := strconv.FormatFloat(v, 'f', dec, 64) + " " + units[ui]
		if i == 0 {
			label = "0"
		}
		ticks = append(ticks, axisTick{b, label})
		top = b
		if b >= ymax {
			break
		}
	}
	return max(top, 1), ticks
}

// timeTicks labels the time axis from t0 to t1 (ns) in seconds since the
// run's start. The page's script does the same when it zooms.
func timeTicks(t0, t1 uint64) []axisTick {
	from, to := float64(t0)/1e9, float64(t1)/1e9
	step := niceStep(to-from, 10)
	dec := 0
	if step < 1 {
		dec = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	var out []axisTick
	for i := math.Ceil(from/step - 1e-9); ; i++ {
		v := i * step
		if v == 0 {
			v = 0 // never "-0 s"
		}
		if v > to*1.0000001 {
			break
		}
		out = append(out, axisTick{uint64(math.Round(v * 1e9)), strconv.FormatFloat(v, 'f', dec, 64) + " s"})
	}
	return out
}

// sparkline is a leak's live bytes at its window ends, drawn small.
type sparkline struct {
	W, H   int
	Path   string
	Points []tick // Pos is "x,y" of each window end
}

func newSparkline(live []uint64) *sparkline {
	if len(live) < 2 {
		return nil
	}
	const w, h = 120, 28
	var top uint64
	for _, v := range live {
		top = max(top, v)
	}
	top = max(top, 1)
	s := &sparkline{W: w, H: h}
	var b strings.Builder
	for i, v := range live {
		x := 3 + float64(w-6)*float64(i)/float64(len(live)-1)
		y := float64(h-3) - float64(h-6)*float64(v)/float64(top)
		op := "L"
		if i == 0 {
			op = "M"
		}
		fmt.Fprintf(&b, "%s%s %s ", op, f1(x), f1(y))
	}
	s.Path = strings.TrimSpace(b.String())
	return s
}

// markCharW estimates the width of a mark label's character in SVG units
// (600 13px system-ui, the size on a narrow page, averages about 7.5),
// rounded up: a box estimated too wide only leaves some space, one too
// narrow would let labels overlap.
const markCharW = 8.0

// labelBox is a label's box in SVG units.
type labelBox struct{ x0, y0, x1, y1 float64 }

// overlaps says whether a and b come closer than a small gap.
func (a labelBox) overlaps(b labelBox) bool {
	return a.x0 < b.x1+3 && b.x0 < a.x1+3 && a.y0 < b.y1+1 && b.y0 < a.y1+1
}

// placeLabels lays out the labels of c's marks and leak spans so that none
// overlaps another or leaves the plot's columns. In order (the peak, OOMs,
// findings, then leak spans) each takes the free place nearest the line it
// prefers: on a row above the plot or one of the rows down through it,
// right of its point or left of it. A label that fits nowhere is not drawn;
// the legend under the chart has it, and its mark's tooltip.
func placeLabels(c *chart) {
	rows := []float64{chartTop - 6}
	for y := float64(chartTop + 12); y <= float64(c.H-chartBottom-4); y += 14 {
		rows = append(rows, y)
	}
	var taken []labelBox
	// place finds a place for label, starting right of xs or ending left
	// of xe, nearest the baseline want.
	place := func(label string, xs, xe, want float64) (x, y float64, anchor string, ok bool) {
		w := float64(utf8.RuneCountInString(label)) * markCharW
		order := slices.Clone(rows)
		slices.SortStableFunc(order, func(a, b float64) int { return cmp.Compare(math.Abs(a-want), math.Abs(b-want)) })
		for _, y := range order {
			for _, b := range []labelBox{{xs, y - 10, xs + w, y + 3}, {xe - w, y - 10, xe, y + 3}} {
				if b.x0 < chartLeft+2 || b.x1 > chartW-2 || slices.ContainsFunc(taken, b.overlaps) {
					continue
				}
				taken = append(taken, b)
				if b.x0 == xs {
					return xs, y, "start", true
				}
				return xe, y, "end", true
			}
		}
		return 0, 0, "", false
	}
	for i := range c.Marks {
		m := &c.Marks[i]
		if m.Label == "" {
			continue
		}
		want, _ := strconv.ParseFloat(m.LabelY, 64)
		x, y, anchor, ok := place(m.Label, m.x+6, m.x-6, want)
		if !ok {
			m.Label = ""
			continue
		}
		m.LabelX, m.LabelY, m.Anchor = f1(x), f1(y), anchor
	}
	for i := range c.Regions {
		r := &c.Regions[i]
		x, y, anchor, ok := place(r.Label, r.x0+4, r.x1-4, chartTop+12)
		if !ok {
			r.Label = ""
			continue
		}
		r.LabelX, r.LabelY, r.Anchor = f1(x), f1(y), anchor
	}
}

// leakChartH is the height of a leak's own chart: a small one under its
// device's.
const leakChartH = 150

// leakColor draws a leak's own chart, the leak table's trend color.
const leakColor = "#c2410c"

// leakCharts gives each leak on device dev a chart of its own: the leaking
// site's live bytes at the end of each window, on the site's own scale,
// since a leak of megabytes under gigabytes of peaks is a flat line on the
// device's chart. The line starts at the process's first traced moment,
// where tracing knew none of the site's bytes.
func leakCharts(res *analysis.Result, t0, dur uint64, dev int32) []*chart {
	var out []*chart
	for i, f := range wordFindings(res) {
		l := f.Leak
		if f.Kind != analysis.KindLeak || l == nil || len(l.Live) == 0 || !findingOnDevice(res, f.Finding, dev) {
			continue
		}
		site := analysis.NoStack
		if len(f.Stacks) > 0 {
			site = f.Stacks[0].Site
		}
		var top uint64
		for _, v := range l.Live {
			top = max(top, v)
		}
		c, sc := newAxes(fmt.Sprintf("Leak #%d on device %s: %s", i+1, analysis.DeviceName(dev), site), leakChartH, t0, dur, top)
		c.Caption = fmt.Sprintf("The leaking site's own live bytes at the end of each window, on its own scale: +%s over the run",
			units.Bytes(f.Bytes))
		if r := growthRate(l); r != "" {
			c.Caption += ", " + r
		}
		c.Caption += "." + leadInText(t0)
		var b strings.Builder
		fmt.Fprintf(&b, "M%s %s", f1(sc.x(res.Rel(l.From))), f1(sc.y(0)))
		for k, e := range l.WindowEnds {
			if k < len(l.Live) {
				fmt.Fprintf(&b, "L%s %s", f1(sc.x(res.Rel(e))), f1(sc.y(l.Live[k])))
			}
		}
		c.Series = []*series{{Label: fmt.Sprintf("pid %s: %s", res.Run.PIDText(f.PID), site), Color: leakColor, Line: b.String(), Max: top}}
		last := len(l.Live) - 1
		if last < len(l.WindowEnds) {
			m := mark{Kind: "peak", Label: "+" + units.Bytes(f.Bytes),
				Title: fmt.Sprintf("%s live at %s at %s", bytesText(l.Live[last]), site, secs(res, l.WindowEnds[last]))}
			placeLabel(&m, sc.x(res.Rel(l.WindowEnds[last])), sc.y(l.Live[last]))
			c.Marks = append(c.Marks, m)
		}
		placeLabels(c)
		out = append(out, c)
	}
	return out
}
