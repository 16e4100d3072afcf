package checkpoint

import (
	"cmp"
	"slices"

	"github.com/vramprof/vramprof/probes/event"
)

// A Tracker's timelines (event.Checkpoint's Timelines): each process's
// live bytes per layer, memory and device, downsampled exactly as the
// analysis downsamples its own (analysis/grid.go), so that a report made
// from a checkpoint shows the timeline of the stretch it summarised as the
// whole stream's report does. The grid is the analysis's: buckets from the
// header's start, 1024 ns wide at first, doubling in width (a level up,
// each bucket the union of two) whenever a time falls past the last of
// event.TimelineBuckets. Memory: event.TimelineBuckets buckets per
// timeline.

// firstBucketWidth is the analysis's initial bucket width
// (analysis.initialBucketWidth): the grids must agree for the buckets to
// merge.
const firstBucketWidth = 1024

// lineKey is one timeline: a process's memory in one layer (Host: pinned
// host memory, else device and physical) on one device.
type lineKey struct {
	pid    uint32
	layer  event.Layer
	host   bool
	device int32
}

// line is one timeline: the level now, and its buckets at level (Index
// unused), ok telling the buckets with a value.
type line struct {
	live    uint64
	level   uint64
	buckets []event.TimelineBucket
	ok      []bool
}

// timelines is a Tracker's grid and the timelines on it.
type timelines struct {
	origin uint64
	width  uint64
	level  uint64
	lines  map[lineKey]*line
	// last is the line of lastKey: most events follow the one before.
	last    *line
	lastKey lineKey
}

func newTimelines() timelines {
	return timelines{width: firstBucketWidth, lines: make(map[lineKey]*line)}
}

// index returns the bucket of t, growing the grid when t lies past its end.
func (g *timelines) index(t uint64) int {
	if t < g.origin {
		return 0
	}
	d := t - g.origin
	for d/g.width >= event.TimelineBuckets {
		g.width *= 2
		g.level++
	}
	return int(d / g.width)
}

// sync brings l up to the grid's level: bucket i goes into i>>d.
func (l *line) sync(level uint64) {
	d := level - l.level
	if d == 0 {
		return
	}
	l.level = level
	if len(l.buckets) == 0 {
		return
	}
	n := (len(l.buckets)-1)>>d + 1
	merged, ok := make([]event.TimelineBucket, n), make([]bool, n)
	for i, b := range l.buckets {
		if l.ok[i] {
			merge(&merged[i>>d], &ok[i>>d], b)
		}
	}
	l.buckets, l.ok = merged, ok
}

// merge folds b (a later bucket or sample) into m; ties keep the earlier
// time, as the analysis's minMax.merge does.
func merge(m *event.TimelineBucket, ok *bool, b event.TimelineBucket) {
	if !*ok {
		*m, *ok = b, true
		return
	}
	if b.MinBytes < m.MinBytes {
		m.MinBytes, m.MinTime = b.MinBytes, b.MinTime
	}
	if b.MaxBytes > m.MaxBytes {
		m.MaxBytes, m.MaxTime = b.MaxBytes, b.MaxTime
	}
}

// follow follows allocation e into (add) or out of its process's timeline
// at time at.
func (g *timelines) follow(e *event.Event, add bool, at uint64) {
	layer := e.Layer
	if layer == event.LayerUnknown {
		layer = event.LayerSegment
	}
	k := lineKey{e.PID, layer, e.Kind == event.KindHostAlloc, e.Device}
	l := g.last
	if l == nil || k != g.lastKey {
		l = g.lines[k]
		if l == nil {
			l = &line{}
			g.lines[k] = l
		}
		g.last, g.lastKey = l, k
	}
	if add {
		l.live += e.Size
	} else {
		l.live -= e.Size
	}
	i := g.index(at)
	l.sync(g.level)
	for len(l.buckets) <= i {
		l.buckets = append(l.buckets, event.TimelineBucket{})
		l.ok = append(l.ok, false)
	}
	merge(&l.buckets[i], &l.ok[i], event.TimelineBucket{MinTime: at, MinBytes: l.live, MaxTime: at, MaxBytes: l.live})
}

// forget sets pid's levels to nothing, as gone with its process image,
// without a point: the analysis ends the old image's timelines there.
func (g *timelines) forget(pid uint32) {
	for k, l := range g.lines {
		if k.pid == pid {
			l.live = 0
		}
	}
}

// checkpoint returns the timelines, in key order, at the grid's level.
func (g *timelines) checkpoint(c *event.Checkpoint) {
	c.TimelineLevel = g.level
	for k, l := range g.lines {
		l.sync(g.level)
		tl := event.CheckpointTimeline{PID: k.pid, Layer: k.layer, Host: k.host, Device: k.device}
		for i, b := range l.buckets {
			if l.ok[i] {
				b.Index = uint64(i)
				tl.Buckets = append(tl.Buckets, b)
			}
		}
		if len(tl.Buckets) > 0 {
			c.Timelines = append(c.Timelines, tl)
		}
	}
	slices.SortFunc(c.Timelines, func(x, y event.CheckpointTimeline) int {
		return cmp.Or(cmp.Compare(x.PID, y.PID), cmp.Compare(x.Layer, y.Layer), boolCmp(x.Host, y.Host),
			cmp.Compare(x.Device, y.Device))
	})
}
