package analysis

import (
	"cmp"
	"slices"
	"sort"

	"github.com/vramprof/vramprof/analysis/rules"
	"github.com/vramprof/vramprof/probes/event"
)

const (
	// DefaultIterationLog caps, per stack, the allocations kept for
	// iteration detection and the live-bytes changes kept for the rates
	// per iteration; past it each keeps its bursts' starts (ends) only,
	// at most as many (see doc.go, "Iterations"). 2^16 entries: 5 MiB per
	// stack at most.
	DefaultIterationLog = 1 << 16
	// maxIterationStarts caps Iterations.Starts.
	maxIterationStarts = 1000
	// minIterations is the fewest iterations that make a loop.
	minIterations = 4
	// maxNest is the most micro-steps a step holds that outer looks for:
	// gradient accumulation runs a few to a few dozen.
	maxNest = 64
)

// Iterations is a process's training loop as its allocations show it (see
// doc.go, "Iterations").
type Iterations struct {
	// Count is the number of iterations: bursts of allocations at Site,
	// and one cut by an out-of-memory failure (see doc.go).
	Count uint64
	// PeriodNs is the median time between iteration starts.
	PeriodNs uint64
	// Starts are the iteration starts (absolute stream times), the first
	// maxIterationStarts (1000) of them; LastStart is the last start. A
	// start the site's compacted log does not hold (an iteration begun
	// mid-burst) and a cut iteration have none.
	Starts    []uint64
	LastStart uint64
	// Stack is the allocation site that paces the loop; Site its rendering.
	Stack event.StackID
	Site  string
	// AllocatedBytesPerIteration is the device bytes (tensors when they
	// pace the loop) the process allocated from its first iteration's
	// start to its last's, over the iterations between (Count - 1 without
	// a cut one): what a complete iteration allocates on average, exact
	// whatever the run's length.
	AllocatedBytesPerIteration float64
	// LiveGrowthPerIteration is the least-squares slope of the process's
	// live device bytes (tensors when they pace the loop) just before each
	// iteration's start: about 0 for a steady loop, the leaks' rate for a
	// leaking one.
	LiveGrowthPerIteration float64
}

// procFigures is a process's live and cumulative allocated bytes in one
// scope (device or tensors).
type procFigures struct {
	live, allocated uint64
}

// procNow is a process's figures after its latest change, by event seq,
// and before that event: all a site's allocation needs to carry the
// process's figures just before it (see siteTimes), in constant memory.
type procNow struct {
	seq       uint64
	cur, prev procFigures
	// allocAt and failAt are the times of its latest successful and
	// failed allocations, failStack the latter's stack (see cutByFailure).
	allocAt, failAt uint64
	failStack       event.StackID
}

// before returns the figures just before event seq, which is at least the
// latest change's.
func (p *procNow) before(seq uint64) procFigures {
	if p.seq == seq {
		return p.prev
	}
	return p.cur
}

// set records the figures after a change by event seq.
func (p *procNow) set(seq uint64, f procFigures) {
	if seq != p.seq {
		p.prev, p.seq = p.cur, seq
	}
	p.cur = f
}

// siteMark is a burst start kept by a compacted site log: the process's
// figures just before it, its ordinal among the stack's allocations and
// the time since the stack's previous allocation.
type siteMark struct {
	before   procFigures
	ord, gap uint64
}

// siteTimes is one stack's successful non-nested device allocations (see
// doc.go, "Iterations"): the event sequence number and time of each, with
// the process's figures just before it, until limit of them; then
// compacted to its burst starts, the allocations after a gap longer than
// the least of its burst limits then (keep), and from there on only
// those. A compacted log full again, or a full one whose allocations are
// each an iteration (nothing to compact), stops: covered is then the
// allocations it covers. count goes on.
type siteTimes struct {
	st     stamps[procFigures]
	bursts stamps[siteMark]
	// limits are the burst limits when it was compacted (nil while it
	// was not), keep the least of them.
	limits []uint64
	keep   uint64
	count  uint64
	// first and last are the times of its first and latest allocations.
	first, last uint64
	covered     uint64
	stopped     bool
}

// add logs an allocation at time t, the process's figures f just before
// it; limit is the log's cap.
func (s *siteTimes) add(seq, t uint64, f procFigures, limit int) {
	ord, gap := s.count, t-min(t, s.last)
	if ord == 0 {
		s.first = t
	}
	s.count++
	s.last = t
	switch {
	case s.stopped:
	case s.limits == nil:
		s.st.add(seq, t, f)
		if s.st.len() == limit {
			s.compact()
		}
	case ord == 0 || gap > s.keep:
		s.bursts.add(seq, t, siteMark{f, ord, gap})
		if s.bursts.len() == limit {
			s.stopped, s.covered = true, s.count
		}
	}
}

// compact keeps a full log's burst starts at the least of its burst
// limits (every limit the loop tries is at least that, so every burst it
// cuts starts at a kept allocation, and the kept gaps cut them again at
// any larger limit). A site whose loop takes every allocation for an
// iteration (one a step) has no bursts to keep: it stops.
func (s *siteTimes) compact() {
	seqs, times := s.st.unpack()
	all := completeAllocs(seqs, times, nil)
	limits := burstLimits(times)
	var l *loop
	for _, limit := range limits {
		if c := allocsLoop(all, limit); c != nil && better(c, l) {
			l = c
		}
	}
	if l != nil && l.per == 1 {
		s.stopped, s.covered = true, s.count
		return
	}
	s.limits, s.keep = limits, slices.Min(limits)
	for i := range seqs {
		if i == 0 || all.gap[i] > s.keep {
			s.bursts.add(seqs[i], times[i], siteMark{s.st.payload(i), uint64(i), all.gap[i]})
		}
	}
	s.st = stamps[procFigures]{}
	if s.bursts.len() == len(seqs) {
		// Every allocation a burst start: nothing was compacted.
		s.stopped, s.covered = true, s.count
	}
}

// liveLog is a stack's live-bytes changes, in stream order: pair i of st
// is the event and time, its payload the live bytes after it. Once it
// holds limit changes it is compacted (see doc.go, "Iterations"): ends
// keeps the last change of each burst of the stack's changes (a burst
// ends at a gap longer than keep, the least of its burst limits then),
// with the next burst's first change, and last the latest change. A
// compacted log answers the live bytes before an event exactly when no
// change of the stack came between the burst's end and it (exactBefore);
// full once ends holds limit entries.
type liveLog struct {
	st   stamps[uint64]
	full bool
	// compacted: st gave way to ends, and liveBursts is set.
	compacted bool
	ends      stamps[liveEnd]
	// liveBursts is what a compacted log keeps besides ends, behind a
	// pointer: every stack has a log, few are ever compacted.
	*liveBursts
}

// liveBursts is a compacted liveLog's figures: keep is the gap that ends
// a burst; first is the stack's first change; last its latest.
type liveBursts struct {
	keep  uint64
	first liveMark
	last  liveMark
}

// liveMark is one change of a stack's live bytes: its event, time and the
// live bytes after it.
type liveMark struct {
	seq, time, live uint64
}

// liveEnd is a compacted live log's entry (the pair is the change that
// ended a burst): the live bytes after it, and the event and time of the
// next change, the next burst's first.
type liveEnd struct {
	live, next, nextTime uint64
}

// add logs a change; limit is the log's cap.
func (l *liveLog) add(seq, t, live uint64, limit int) {
	switch {
	case l.full:
	case l.compacted:
		if t-min(t, l.last.time) > l.keep {
			l.ends.add(l.last.seq, l.last.time, liveEnd{l.last.live, seq, t})
			if l.ends.len() >= limit {
				l.full, l.ends = true, stamps[liveEnd]{}
				return
			}
		}
		l.last = liveMark{seq, t, live}
	case l.st.len() == limit:
		l.compact()
		l.add(seq, t, live, limit)
	default:
		l.st.add(seq, t, live)
	}
}

// compact turns a full log into its bursts' ends (see liveLog).
func (l *liveLog) compact() {
	seqs, times := l.st.unpack()
	n := len(seqs) - 1
	l.liveBursts = &liveBursts{keep: slices.Min(burstLimits(times))}
	l.first = liveMark{seqs[0], times[0], l.st.payload(0)}
	l.last = liveMark{seqs[n], times[n], l.st.payload(n)}
	for i := range n {
		if times[i+1]-min(times[i+1], times[i]) > l.keep {
			l.ends.add(seqs[i], times[i], liveEnd{l.st.payload(i), seqs[i+1], times[i+1]})
		}
	}
	l.st, l.compacted = stamps[uint64]{}, true
}

// exactBefore reports whether before(seq) is exact: always for a complete
// log; for a compacted one, when no change fell between the end of the
// burst before seq and seq.
func (l *liveLog) exactBefore(seq uint64) bool {
	if !l.compacted || seq > l.last.seq {
		return true
	}
	i := l.ends.search(seq)
	if i == 0 {
		return seq <= l.first.seq
	}
	return seq <= l.ends.payload(i-1).next
}

// exactAt reports whether at(t) is exact (see exactBefore).
func (l *liveLog) exactAt(t uint64) bool {
	if !l.compacted || t >= l.last.time {
		return true
	}
	i := l.ends.lastAtOrBefore(t)
	if i < 0 {
		return t < l.first.time
	}
	return t < l.ends.payload(i).nextTime
}

// iterationModel is what iteration detection and the rates per iteration
// read (see doc.go, "Iterations"), a liveObserver: per stack the times of
// its device allocations (siteTimes: all of them, then its burst starts),
// each with its process's live and allocated bytes just before it, and
// (device scope and pinned host) its live-bytes changes. Each log keeps at
// most limit entries; per process, only its current figures.
type iterationModel struct {
	limit int
	// stacks are by group index, held by value: every change appends to
	// a stack's logs, and a pointer per stack would be one more cache miss
	// to reach their tails.
	stacks []stackLogs
	// procs are by account index (device and block scopes only).
	procs []procNow
	// loops and lastEvent are the processes' loops and the stream's last
	// event time, set at Finish for log.
	loops     map[uint32]*loop
	lastEvent uint64
}

// stackLogs are a stack's site and live-bytes logs, side by side: an
// allocation appends to both. A stack has no site while its count is 0,
// no log while it is empty and not full (see log).
type stackLogs struct {
	site siteTimes
	live liveLog
}

func newIterationModel(limit int) *iterationModel { return &iterationModel{limit: limit} }

// grow extends s to hold index i.
func grow[T any](s []T, i int32) []T {
	if int(i) < len(s) {
		return s
	}
	return append(s, make([]T, int(i)+1-len(s))...)
}

// changed logs a change: a successful non-nested device allocation at the
// segment or block layer (its site, with the process's figures before
// it), the stack's new live bytes (device scope, tensors and pinned host)
// and the process's figures (device scope and tensors).
func (m *iterationModel) changed(c *liveChange) {
	gi, si := c.group, c.account
	var p *procNow
	if c.sc == deviceScope || c.sc == blockScope {
		if int(si) >= len(m.procs) { // stored only when it grows: a slice store costs a write barrier
			m.procs = grow(m.procs, si)
		}
		p = &m.procs[si]
	}
	// Both logs are of the device scope (a site's allocations are at the
	// segment layer in device memory), of the block layer (a tensor's
	// site) or of pinned host memory.
	if c.sc == deviceScope || c.sc == hostScope || c.sc == blockScope {
		if int(gi) >= len(m.stacks) {
			m.stacks = grow(m.stacks, gi)
		}
		sl := &m.stacks[gi]
		if p != nil && c.alloc && c.mem == SpaceDevice && (c.layer == event.LayerSegment || c.layer == event.LayerBlock) {
			sl.site.add(c.seq, c.time, p.before(c.seq), m.limit)
		}
		sl.live.add(c.seq, c.time, c.groupLive, m.limit)
	}
	if p != nil {
		p.set(c.seq, procFigures{c.live, c.allocated})
		if c.alloc {
			p.allocAt = max(p.allocAt, c.time)
		}
	}
}

// failed logs a failed allocation at time t from stack st in the
// process's account si (device scope or tensors).
func (m *iterationModel) failed(si int32, t uint64, st event.StackID) {
	m.procs = grow(m.procs, si)
	if p := &m.procs[si]; t >= p.failAt {
		p.failAt, p.failStack = t, st
	}
}

// log returns a stack's live-bytes log when it answers exactly what the
// rates per iteration read (the live bytes just before each of its
// process's loop's starts, and at the last start plus the period, at most
// the last event): a complete log, or a compacted one exact there; nil
// when it has none, it overflowed, or it is compacted and inexact there
// (or its process has no loop). loops and lastEvent are set at Finish.
func (m *iterationModel) log(g *groupState) *liveLog {
	if int(g.ix) >= len(m.stacks) {
		return nil
	}
	l := &m.stacks[g.ix].live
	switch {
	case l.full:
		return nil
	case !l.compacted:
		if l.st.len() == 0 {
			return nil
		}
		return l
	}
	lp := m.loops[g.key.pid]
	if lp == nil {
		return nil
	}
	for _, s := range lp.seq {
		if !l.exactBefore(s) {
			return nil
		}
	}
	if !l.exactAt(min(lp.starts[len(lp.starts)-1]+lp.period, m.lastEvent)) {
		return nil
	}
	return l
}

// before returns the live bytes just before event seq (see exactBefore
// for a compacted log).
func (l *liveLog) before(seq uint64) uint64 {
	if l.compacted {
		if seq > l.last.seq {
			return l.last.live
		}
		if i := l.ends.search(seq); i > 0 {
			return l.ends.payload(i - 1).live
		}
		return 0
	}
	i := l.st.search(seq)
	if i == 0 {
		return 0
	}
	return l.st.payload(i - 1)
}

// at returns the live bytes at time t (after every change up to t).
func (l *liveLog) at(t uint64) uint64 {
	if l.compacted {
		if t >= l.last.time {
			return l.last.live
		}
		if i := l.ends.lastAtOrBefore(t); i >= 0 {
			return l.ends.payload(i).live
		}
		return 0
	}
	// Times may go backwards by a few ns between CPUs: take the latest
	// change in stream order stamped at or before t.
	if i := l.st.lastAtOrBefore(t); i >= 0 {
		return l.st.payload(i)
	}
	return 0
}

// loop is a candidate training loop: the burst starts at one site.
type loop struct {
	stack event.StackID
	// layer is the site's: the block layer when the process's blocks were
	// traced (its tensors pace the loop), else the segment layer.
	layer event.Layer
	// patterned: long spacings recur (see regular). short: its starts
	// span less than a quarter of its process's allocations (a few made
	// in a row at load time).
	patterned, short bool
	// seq, starts and before are the iterations' first allocations: their
	// events, times and the process's figures (in the site's scope) just
	// before them; index their iterations' numbers (0 for the first). A
	// compacted site log has no record of an iteration that started
	// mid-burst: then a number is skipped.
	seq, starts []uint64
	before      []procFigures
	index       []uint64
	period      uint64
	count       uint64
	// per is the site's allocations per iteration.
	per uint64
}

// bursts groups a site's allocations into bursts: a new burst starts at the
// first allocation and after every long gap, a gap longer than limit. It
// returns the burst starts' indexes; with no long gap, every allocation
// is its own burst.
func bursts(times []uint64, limit uint64) []int {
	out := []int{0}
	for i := 1; i < len(times); i++ {
		if times[i]-min(times[i], times[i-1]) > limit {
			out = append(out, i)
		}
	}
	if len(out) == 1 {
		// No long gap: each allocation is its own burst.
		out = out[:0]
		for i := range times {
			out = append(out, i)
		}
	}
	return out
}

// burstLimits are the candidate limits of a long gap between a site's
// allocations (see doc.go, "Iterations"): 4 times the lower quartile of
// its gaps, and, when there is one, the natural break of the sorted gaps,
// the largest jump between consecutive ones by a factor of at least 4
// that leaves at least minIterations-1 gaps above it. The in-step gaps
// of a site that allocates several tensors per step vary (a cached block
// is quicker than a new segment), by more than 4 times now and then, and
// the step's gap is far longer: the quartile splits steps there, the
// break does not. A few stalls make a break of their own: the quartile
// is right there. The loop takes the one that makes more iterations.
func burstLimits(times []uint64) []uint64 {
	gaps := make([]uint64, 0, len(times)-1)
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i]-min(times[i], times[i-1]))
	}
	slices.Sort(gaps)
	out := []uint64{4 * gaps[len(gaps)/4]}
	best, limit := 0.0, uint64(0)
	for i := 0; i+minIterations <= len(gaps); i++ {
		r := float64(gaps[i+1]) / float64(max(gaps[i], 1))
		if r >= 4 && r > best {
			best, limit = r, gaps[i]
		}
	}
	if best > 0 && limit != out[0] {
		out = append(out, limit)
	}
	return out
}

// burstSize is burstMode over every allocation's index (bursts' output).
func burstSize(idx []int, n int) int {
	first := make([]uint64, len(idx))
	for j, i := range idx {
		first[j] = uint64(i)
	}
	return int(burstMode(first, uint64(n)))
}

// burstMode is the most common number of allocations in a burst (the
// smaller on a tie), given the bursts' first ordinals among n allocations:
// the site's allocations per iteration. A stalled thread splits a burst
// now and then; the most common size is not fooled by it.
func burstMode(first []uint64, n uint64) uint64 {
	counts := make(map[uint64]int)
	for j, i := range first {
		end := n
		if j+1 < len(first) {
			end = first[j+1]
		}
		counts[end-i]++
	}
	best, most := uint64(1), 0
	for size, c := range counts {
		if c > most || c == most && size < best {
			best, most = size, c
		}
	}
	return best
}

// regular reports the median spacing of starts, whether it is regular
// (the median absolute deviation of the spacings is at most a quarter of
// their median, which is positive), and whether it is patterned: more
// than one spacing in 8 is longer than 4 times the median, and they recur
// at one stride (see strided). A stall now and then is not a pattern; a
// site with several allocations per step taken one per iteration has a
// long spacing at every step, every k spacings. A loaded machine can
// stall a real loop that often, at random: not a pattern either. A
// patterned loop is only taken when no other is found (see iterations).
func regular(starts []uint64) (period uint64, ok, patterned bool) {
	d := make([]uint64, 0, len(starts)-1)
	for i := 1; i < len(starts); i++ {
		d = append(d, starts[i]-min(starts[i], starts[i-1]))
	}
	inOrder := slices.Clone(d)
	slices.Sort(d)
	m := d[len(d)/2]
	if m == 0 {
		return 0, false, false
	}
	dev := make([]uint64, len(d))
	for i, x := range d {
		if x > m {
			dev[i] = x - m
		} else {
			dev[i] = m - x
		}
	}
	slices.Sort(dev)
	long := len(d) - sort.Search(len(d), func(i int) bool { return d[i] > 4*m })
	return m, 4*dev[len(dev)/2] <= m, 8*long > len(d) && strided(inOrder, 4*m)
}

// strided reports whether the spacings d longer than limit recur at one
// stride: the most common distance between consecutive ones is at least 3
// in 4 of them. Fewer than 3 long spacings cannot tell: strided.
func strided(d []uint64, limit uint64) bool {
	var at []int
	for i, x := range d {
		if x > limit {
			at = append(at, i)
		}
	}
	if len(at) < 3 {
		return true
	}
	counts := make(map[int]int)
	most := 0
	for j := 1; j < len(at); j++ {
		counts[at[j]-at[j-1]]++
		most = max(most, counts[at[j]-at[j-1]])
	}
	return 4*most >= 3*(len(at)-1)
}

// better reports whether loop c is a better pick than l (nil: none yet):
// not short before short, not patterned before patterned, then more
// iterations, then the earlier first start.
func better(c, l *loop) bool {
	switch {
	case l == nil:
		return true
	case c.short != l.short:
		return !c.short
	case c.patterned != l.patterned:
		return !c.patterned
	case c.count != l.count:
		return c.count > l.count
	}
	return c.starts[0] < l.starts[0]
}

// iterations finds each process's loop (see doc.go, "Iterations"), keyed by
// instance id.
func (a *Analyzer) iterations(r *Result) map[uint32]*loop {
	out := make(map[uint32]*loop)
	// A process whose blocks were traced is paced by its tensors: the
	// segments a caching allocator gets come in its warm-up and at new
	// sizes, not once per step (see doc.go, "Iterations").
	blocks := make(map[uint32]bool)
	for gi := range a.iters.stacks {
		if a.iters.stacks[gi].site.count > 0 && a.groups[gi].key.sc == blockScope {
			blocks[a.groups[gi].key.pid] = true
		}
	}
	// A site is a source path: the stacks of one call from a loop the
	// compiler unrolled (one per return address) allocate as one.
	type siteKey struct {
		pid   uint32
		block bool
		src   string
		stack event.StackID
	}
	// Each process's span of allocations in the layer that paces it.
	type span struct{ from, to uint64 }
	spans := make(map[uint32]span)
	for gi := range a.iters.stacks {
		k, s := a.groups[gi].key, &a.iters.stacks[gi].site
		if s.count == 0 || (k.sc == blockScope) != blocks[k.pid] {
			continue
		}
		sp, ok := spans[k.pid]
		if !ok || s.first < sp.from {
			sp.from = s.first
		}
		spans[k.pid] = span{sp.from, max(sp.to, s.last)}
	}
	bySite := make(map[siteKey][]int32) // group indexes
	cands := make(map[uint32][]*loop)   // every site's loop, per process
	var keys []siteKey
	for gi := range a.iters.stacks {
		k := a.groups[gi].key
		if a.iters.stacks[gi].site.count == 0 || (k.sc == blockScope) != blocks[k.pid] {
			continue
		}
		sk := siteKey{pid: k.pid, block: k.sc == blockScope}
		if st := a.stacks[k.stack]; st != nil && len(st.Frames) > 0 {
			sk.src = rules.SourceKey(st.Frames)
		} else {
			sk.stack = k.stack
		}
		if bySite[sk] == nil {
			keys = append(keys, sk)
		}
		bySite[sk] = append(bySite[sk], int32(gi))
	}
	// Each site's representative: its stack with the most allocations
	// (the lower ID on a tie), which names it and orders the sites.
	rep := func(gis []int32) int32 {
		best := gis[0]
		for _, gi := range gis[1:] {
			c, b := a.iters.stacks[gi].site.count, a.iters.stacks[best].site.count
			if c > b || c == b && a.groups[gi].key.stack < a.groups[best].key.stack {
				best = gi
			}
		}
		return best
	}
	slices.SortFunc(keys, func(x, y siteKey) int {
		i, j := rep(bySite[x]), rep(bySite[y])
		return cmp.Or(cmp.Compare(x.pid, y.pid), cmp.Compare(a.groups[i].key.stack, a.groups[j].key.stack))
	})
	for _, sk := range keys {
		gis := bySite[sk]
		gi := rep(gis)
		k := a.groups[gi].key
		var l *loop
		if all := a.siteAllocs(gis, gi); all != nil {
			sp := spans[k.pid]
			for _, limit := range all.limits {
				c := allocsLoop(all, limit)
				if c == nil {
					continue
				}
				c.short = 4*(c.starts[len(c.starts)-1]-c.starts[0]) < sp.to-sp.from
				if better(c, l) {
					l = c
				}
			}
		}
		if l == nil {
			continue
		}
		l.stack, l.layer = k.stack, k.sc.layer
		cands[k.pid] = append(cands[k.pid], l)
		if better(l, out[k.pid]) {
			out[k.pid] = l
		}
	}
	for pid, l := range out {
		if o := outer(l, cands[pid]); o != nil {
			l = o
			out[pid] = l
		}
		if a.cutByFailure(r, pid, l) {
			l.count++
		}
	}
	a.iters.loops, a.iters.lastEvent = out, a.lastEvent
	return out
}

// outer is the step that loop l's iterations nest in (see doc.go,
// "Iterations"), among the process's other sites' loops; nil when there
// is none. l's iterations are micro-steps of a k-step (gradient
// accumulation) when the process's live bytes at l's starts repeat every
// k of them and not every one (repeatK), and another site's loop (the
// optimizer's gradients, made once a step) has about count/k iterations
// of about k times the period: that loop is the step.
func outer(l *loop, cands []*loop) *loop {
	k := repeatK(l.before)
	if k < 2 {
		return nil
	}
	var best *loop
	for _, c := range cands {
		if c == l || c.patterned || c.short || c.count*k+k <= l.count || c.count*k >= l.count+k {
			continue
		}
		want := float64(k) * float64(l.period)
		if d := float64(c.period) - want; d > 0.1*want || -d > 0.1*want {
			continue
		}
		if better(c, best) {
			best = c
		}
	}
	return best
}

// repeatK is the fewest iterations k over which the live bytes just
// before the starts (b) repeat: y[j+k] - y[j] takes one value (a leak's
// growth per k iterations, 0 in a steady loop) for at least 3 in 4 of the
// js (a warm-up, a late step up, does not break it); 0 when no k up to a
// quarter of the starts, and at most maxNest, does.
func repeatK(b []procFigures) uint64 {
	for k := 1; k <= min(len(b)/minIterations, maxNest); k++ {
		counts := make(map[int64]int)
		most := 0
		for j := 0; j+k < len(b); j++ {
			d := int64(b[j+k].live - b[j].live)
			counts[d]++
			most = max(most, counts[d])
		}
		if 4*most >= 3*(len(b)-k) {
			return uint64(k)
		}
	}
	return 0
}

// cutByFailure reports whether the process's last allocation request
// failed (none succeeded after it, in device memory or tensors) between
// half a period and two periods after loop l's last start, at the site
// of an allocation made in the last iteration (from the start before the
// last on: a step's embedding comes before its forward pass): an
// iteration started and was cut by it (a batch too large for the device
// at the step's embedding), and the loop counts it. A request from code
// the loop never ran (a larger batch tried after it) cuts no iteration.
func (a *Analyzer) cutByFailure(r *Result, pid uint32, l *loop) bool {
	var allocAt, failAt uint64
	var failStack event.StackID
	for _, sc := range []scope{deviceScope, blockScope} {
		if sp := a.accounts[accountKey{pid, sc}]; sp != nil && int(sp.ix) < len(a.iters.procs) {
			p := &a.iters.procs[sp.ix]
			allocAt = max(allocAt, p.allocAt)
			if p.failAt > failAt {
				failAt, failStack = p.failAt, p.failStack
			}
		}
	}
	last := l.starts[len(l.starts)-1]
	if failAt <= allocAt || failAt < last+l.period/2 || failAt > last+2*l.period {
		return false
	}
	site, prev := r.Site(failStack), l.starts[len(l.starts)-2]
	for gi := range a.iters.stacks {
		k := a.groups[gi].key
		if s := &a.iters.stacks[gi].site; k.pid == pid && s.count > 0 && s.last >= prev && r.Site(k.stack) == site {
			return true
		}
	}
	return false
}

// siteAllocs is a site's allocations as its logs hold them, in stream
// order: every one (ord 0, 1, 2...) or, from a compacted log, its burst
// starts; gap is the time since the allocation before (0 for the first),
// before the process's figures just before it. n is the allocations the
// entries cover, limits the burst limits to try.
type siteAllocs struct {
	ord, seq, time, gap []uint64
	before              []procFigures
	n                   uint64
	limits              []uint64
	// compacted: the entries are burst starts only.
	compacted bool
}

// completeAllocs is a site's every allocation, from its events and times
// (and the process's figures before each, when known).
func completeAllocs(seqs, times []uint64, before []procFigures) *siteAllocs {
	s := &siteAllocs{seq: seqs, time: times, before: before, n: uint64(len(seqs)),
		ord: make([]uint64, len(seqs)), gap: make([]uint64, len(seqs))}
	if s.before == nil {
		s.before = make([]procFigures, len(seqs))
	}
	for i := range seqs {
		s.ord[i] = uint64(i)
		if i > 0 {
			s.gap[i] = times[i] - min(times[i], times[i-1])
		}
	}
	return s
}

// siteAllocs reads a site's stacks' logs (group indexes gis, gi the
// busiest) as one, in stream order; nil when they hold fewer than
// minIterations allocations. A site with a compacted or stopped log is
// read from its busiest stack alone: the ordinals of two compacted logs
// do not merge (an unrolled call's stacks take turns in every burst, so
// one of them makes as many bursts).
func (a *Analyzer) siteAllocs(gis []int32, gi int32) *siteAllocs {
	for _, g := range gis {
		if s := &a.iters.stacks[g].site; s.limits != nil || s.stopped {
			gis = []int32{gi}
			break
		}
	}
	if s := &a.iters.stacks[gi].site; len(gis) == 1 && s.limits != nil {
		out := &siteAllocs{n: s.count, limits: s.limits, compacted: true}
		if s.stopped {
			out.n = s.covered
		}
		out.seq, out.time = s.bursts.unpack()
		for i := range out.seq {
			m := s.bursts.payload(i)
			out.ord, out.gap, out.before = append(out.ord, m.ord), append(out.gap, m.gap), append(out.before, m.before)
		}
		if len(out.seq) < minIterations {
			return nil
		}
		return out
	}
	var seqs, times []uint64
	var before []procFigures
	for _, g := range gis {
		st := &a.iters.stacks[g].site.st
		s, t := st.unpack()
		seqs, times = append(seqs, s...), append(times, t...)
		for i := range s {
			before = append(before, st.payload(i))
		}
	}
	if len(gis) > 1 {
		// One stream order: by event sequence.
		idx := make([]int, len(seqs))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(i, j int) int { return cmp.Compare(seqs[i], seqs[j]) })
		s2, t2, b2 := make([]uint64, len(idx)), make([]uint64, len(idx)), make([]procFigures, len(idx))
		for n, i := range idx {
			s2[n], t2[n], b2[n] = seqs[i], times[i], before[i]
		}
		seqs, times, before = s2, t2, b2
	}
	if len(seqs) < minIterations {
		return nil
	}
	out := completeAllocs(seqs, times, before)
	out.limits = burstLimits(times)
	return out
}

// siteLoop is a site's loop from every allocation's event and time, with
// bursts split at gaps longer than limit (allocsLoop).
func siteLoop(seqs, times []uint64, limit uint64) *loop {
	return allocsLoop(completeAllocs(seqs, times, nil), limit)
}

// allocsLoop is a site's loop with bursts split at gaps longer than limit
// (see doc.go, "Iterations"): runs of the most common burst size from the
// site's first allocation; nil when they are fewer than minIterations, do
// not start where bursts do (aligned) or are not regular.
func allocsLoop(s *siteAllocs, limit uint64) *loop {
	// Burst starts, as entry indexes: the first allocation and every one
	// after a long gap; with no long gap, every allocation (a compacted
	// log keeps burst starts only: it has no such reading).
	var first []int
	for i := range s.seq {
		if i == 0 || s.gap[i] > limit {
			first = append(first, i)
		}
	}
	if len(first) == 1 {
		if s.compacted {
			return nil
		}
		first = first[:0]
		for i := range s.seq {
			first = append(first, i)
		}
	}
	if len(first) < minIterations {
		return nil
	}
	ords := make([]uint64, len(first))
	for j, i := range first {
		ords[j] = s.ord[i]
	}
	per := burstMode(ords, s.n)
	// Runs of per allocations from the first: each is an iteration,
	// started by its first allocation, when the log holds it.
	l := &loop{per: per}
	hit, runs := 0, uint64(0)
	i, j := 0, 0
	for o := uint64(0); o < s.n; o += per {
		for i < len(s.ord) && s.ord[i] < o {
			i++
		}
		if i < len(s.ord) && s.ord[i] == o {
			l.seq, l.starts = append(l.seq, s.seq[i]), append(l.starts, s.time[i])
			l.before, l.index = append(l.before, s.before[i]), append(l.index, runs)
		}
		for j < len(first) && s.ord[first[j]] < o {
			j++
		}
		if j < len(first) && s.ord[first[j]] == o {
			hit++
		}
		runs++
	}
	l.count = runs
	if l.count < minIterations || len(l.starts) < minIterations || !aligned(hit, runs) {
		return nil
	}
	p, ok, patterned := regular(l.starts)
	if !ok {
		return nil
	}
	l.period, l.patterned = p, patterned
	return l
}

// aligned reports whether runs of a site's allocations per iteration from
// its first start where bursts do: at least 3 in 4 of the runs' starts
// (hit of runs) are burst starts. A stall splits a burst and leaves the
// runs aligned; a size taken for the mode where every size was seen once
// (a few stalls cutting the site in long runs, the smallest of them 3
// allocations of a step of 4) puts the runs' starts mid-burst (see
// doc.go, "Iterations").
func aligned(hit int, runs uint64) bool { return 4*uint64(hit) >= 3*runs }

// setIterations sets Process.Iterations.
func (a *Analyzer) setIterations(r *Result) {
	for id, l := range a.loops {
		i, ok := a.procIndex[id]
		if !ok {
			continue
		}
		it := &Iterations{Count: l.count, PeriodNs: l.period,
			Starts:    slices.Clone(l.starts[:min(len(l.starts), maxIterationStarts)]),
			LastStart: l.starts[len(l.starts)-1], Stack: l.stack, Site: r.Site(l.stack)}
		// The process's figures just before each start were logged with
		// the site's allocations, in its scope: tensors when they pace it.
		if n := len(l.before); n > 1 {
			first, last := l.before[0], l.before[n-1]
			it.AllocatedBytesPerIteration = float64(last.allocated-first.allocated) / float64(l.index[n-1]-l.index[0])
			ys := make([]float64, n)
			for j, b := range l.before {
				ys[j] = float64(b.live)
			}
			// Starts only: after the last one, teardown frees what the
			// loop never touched.
			it.LiveGrowthPerIteration = rules.SlopeAt(l.index, ys)
		}
		r.Processes[i].Iterations = it
		if c := r.Processes[i].Churn; c != nil {
			c.Iterations = l.count
		}
	}
}
