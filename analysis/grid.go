package analysis

import "math"

// initialBucketWidth is the width, in ns, of a grid's buckets before the run
// outgrows it. Any power of two works (initialBucketShift is its log2): the
// width doubles until the run fits, so a small start only costs a few
// doublings (about 30 for a day-long run).
const (
	initialBucketShift = 10
	initialBucketWidth = 1 << initialBucketShift
)

// grid is a time axis of at most max equal buckets from origin. Bucket widths
// double (level goes up by one) whenever a time falls past the last bucket,
// so a stream of unknown length always fits in max buckets and each bucket
// at level L is the union of buckets 2i and 2i+1 at level L-1. Series on the
// grid catch up with the level lazily (sync), which keeps each event O(1)
// amortized.
type grid struct {
	origin uint64
	width  uint64
	// shift is log2(width): index runs twice per event, and a shift is
	// a cycle where a division is tens.
	shift uint
	max   int
	level uint
	// span is max buckets' width (max<<shift, math.MaxUint64 when that
	// overflows): a time less than span after the origin needs no
	// growth, one compare.
	span uint64
}

func newGrid(origin uint64, max int) *grid {
	return &grid{origin: origin, width: initialBucketWidth, shift: initialBucketShift, max: max,
		span: uint64(max) << initialBucketShift}
}

// double doubles the buckets' width.
func (g *grid) double() {
	g.width *= 2
	g.shift++
	g.level++
	g.setSpan()
}

func (g *grid) setSpan() {
	g.span = uint64(g.max) << g.shift
	if g.shift >= 64 || g.span>>g.shift != uint64(g.max) {
		g.span = math.MaxUint64
	}
}

// index returns the bucket of t, growing the grid when t lies past its end.
// Times before the origin fall in bucket 0.
func (g *grid) index(t uint64) int {
	if t < g.origin {
		return 0
	}
	d := t - g.origin
	if d >= g.span {
		for d>>g.shift >= uint64(g.max) {
			g.double()
		}
	}
	return int(d >> g.shift)
}

// bucketEnd returns the first time after bucket i.
func (g *grid) bucketEnd(i int) uint64 {
	return g.origin + uint64(i+1)*g.width
}

// minMax is one timeline bucket: its lowest and highest values and when they
// were first reached.
type minMax struct {
	minT, maxT uint64
	minV, maxV uint64
	ok         bool
}

// merge folds b (a later bucket or sample) into m. Ties keep the earlier
// time, so the first time a peak is reached is the one shown.
func (m *minMax) merge(b minMax) {
	if !b.ok {
		return
	}
	if !m.ok {
		*m = b
		return
	}
	if b.minV < m.minV {
		m.minV, m.minT = b.minV, b.minT
	}
	if b.maxV > m.maxV {
		m.maxV, m.maxT = b.maxV, b.maxT
	}
}

// series is a downsampled timeline on a grid.
type series struct {
	level   uint
	buckets []minMax
}

func (s *series) sync(g *grid) {
	d := g.level - s.level
	if d == 0 {
		return
	}
	s.level = g.level
	if len(s.buckets) == 0 {
		return
	}
	n := (len(s.buckets)-1)>>d + 1
	merged := make([]minMax, n)
	for i, b := range s.buckets {
		merged[i>>d].merge(b)
	}
	s.buckets = merged
}

// add records value v at time t (merge of a one-value bucket, written
// out: it runs at every event).
func (s *series) add(g *grid, t, v uint64) {
	i := g.index(t)
	if s.level != g.level {
		s.sync(g)
	}
	for len(s.buckets) <= i {
		s.buckets = append(s.buckets, minMax{})
	}
	switch m := &s.buckets[i]; {
	case !m.ok:
		*m = minMax{minT: t, maxT: t, minV: v, maxV: v, ok: true}
	case v < m.minV:
		m.minV, m.minT = v, t
	case v > m.maxV:
		m.maxV, m.maxT = v, t
	}
}

// points renders the series: per bucket its min and max in time order, one
// point when they coincide.
func (s *series) points(g *grid) []Point {
	s.sync(g)
	var out []Point
	for _, b := range s.buckets {
		if !b.ok {
			continue
		}
		switch {
		case b.minT < b.maxT:
			out = append(out, Point{b.minT, b.minV}, Point{b.maxT, b.maxV})
		case b.maxT < b.minT:
			out = append(out, Point{b.maxT, b.maxV}, Point{b.minT, b.minV})
		default:
			out = append(out, Point{b.maxT, b.maxV})
		}
	}
	return out
}

// history keeps a value's level at the end of each grid bucket: ends[i] is
// the value after the last update in bucket i, for every bucket before the
// bucket of the latest update; cur is the latest value. The leak rule reads
// it at window ends.
type history struct {
	level uint
	ends  []uint64
	cur   uint64
}

func (h *history) sync(g *grid) {
	d := g.level - h.level
	if d == 0 {
		return
	}
	h.level = g.level
	// Bucket k at the new level ends where old bucket ((k+1)<<d)-1 ends.
	n := len(h.ends) >> d
	for k := range n {
		h.ends[k] = h.ends[((k+1)<<d)-1]
	}
	h.ends = h.ends[:n]
}

// set records that the value became v at time t. Times that go backwards (a
// few ns between CPUs) are credited to the latest bucket.
func (h *history) set(g *grid, t, v uint64) {
	i := g.index(t)
	if h.level != g.level {
		h.sync(g)
	}
	for len(h.ends) < i {
		h.ends = append(h.ends, h.cur)
	}
	h.cur = v
}

// finish returns the values at the end of buckets 0..n-1, the last being the
// latest value.
func (h *history) finish(g *grid, n int) []uint64 {
	h.sync(g)
	for len(h.ends) < n {
		h.ends = append(h.ends, h.cur)
	}
	out := h.ends[:n:n]
	out[n-1] = h.cur
	return out
}
