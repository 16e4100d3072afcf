package analysis

import (
	"cmp"
	"slices"
)

// timelineModel is each process's live bytes per scope and device over
// time, downsampled on one grid (see doc.go, "Timelines"): a liveObserver.
type timelineModel struct {
	// grid is the time axis, made when the time origin is known (start);
	// nil until then.
	grid *grid
	// buckets is the grid's most buckets: half the most points.
	buckets int
	// lines are the series by account index, each a short list by device
	// (a process uses a few devices: a scan beats a map).
	lines [][]deviceSeries
}

// deviceSeries is one process's timeline on one device in one scope.
type deviceSeries struct {
	device int32
	s      series
}

func newTimelineModel(points int) *timelineModel { return &timelineModel{buckets: points / 2} }

// start sets the time origin.
func (m *timelineModel) start(t uint64) { m.grid = newGrid(t, m.buckets) }

// changed adds the process's new live bytes on the device to its timeline.
// A restored allocation adds nothing: the checkpoint's timelines hold it,
// at its time, and the level it makes now is not the one it made then.
func (m *timelineModel) changed(c *liveChange) {
	if c.restored {
		return
	}
	m.series(c.account, c.device).add(m.grid, c.time, c.deviceLive)
}

// series returns an account's series on a device, creating it.
func (m *timelineModel) series(ix int32, device int32) *series {
	if int(ix) >= len(m.lines) {
		m.lines = append(m.lines, make([][]deviceSeries, int(ix)+1-len(m.lines))...)
	}
	ds := m.lines[ix]
	for i := range ds {
		if ds[i].device == device {
			return &ds[i].s
		}
	}
	m.lines[ix] = append(ds, deviceSeries{device: device})
	return &m.lines[ix][len(ds)].s
}

// points returns an account's timeline on a device; nil when nothing changed
// there.
func (m *timelineModel) points(ix int32, device int32) []Point {
	if int(ix) >= len(m.lines) {
		return nil
	}
	for i := range m.lines[ix] {
		if d := &m.lines[ix][i]; d.device == device {
			return d.s.points(m.grid)
		}
	}
	return nil
}

// finishTimelines lists a timeline for every process, scope and device
// the model knows of (a flight recording's restored peaks included, which
// may have no points).
func (a *Analyzer) finishTimelines(r *Result) {
	if a.timelines.grid == nil {
		return
	}
	// ids breaks ties between two instances of one PID that started at
	// the same time, so the order never depends on map iteration.
	type entry struct {
		tl Timeline
		id uint32
	}
	var all []entry
	for k, sp := range a.accounts {
		in := a.inst(k.pid)
		for d := range sp.devices {
			tl := Timeline{PID: in.pid, ProcessStart: in.start, Layer: k.sc.layer, Device: d,
				Points: a.timelines.points(sp.ix, d)}
			if k.sc.host {
				tl.Space = SpaceHost
			}
			all = append(all, entry{tl, k.pid})
		}
	}
	slices.SortFunc(all, func(ex, ey entry) int {
		x, y := &ex.tl, &ey.tl
		return cmp.Or(cmp.Compare(x.PID, y.PID), cmp.Compare(x.ProcessStart, y.ProcessStart),
			cmp.Compare(ex.id, ey.id), cmp.Compare(x.Layer, y.Layer), cmp.Compare(x.Space, y.Space),
			cmp.Compare(x.Device, y.Device))
	})
	for _, e := range all {
		r.Timelines = append(r.Timelines, e.tl)
	}
}
