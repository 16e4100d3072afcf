//go:build linux

package probes

import (
	"sort"

	"github.com/vramprof/vramprof/probes/event"
)

// Effect order.
//
// The BPF side sends a call's record when the call returns, so the ring
// buffer holds calls in the order they returned. That is not the order in
// which they changed memory: thread A's cudaFree(P) can return after thread
// B's cudaMalloc returned P again, and a stream in return order then frees
// B's allocation (an unknown free, B's allocation replaced later). A call
// takes effect somewhere between its entry and its return; what is known
// for certain is:
//
//   - an address can be handed out again only after it was really released,
//     which is after the free's entry, and the allocation that gets it
//     returns after that;
//   - a thread can free P only after the allocation that returned P did.
//
// So a release-kind event (free, host free, unreserve, release, unmap; at
// every API level and at the block layer) is placed at its entry, and every
// other event at its return: both orders above hold for any interleaving.
// Event.Time is that effect time (Duration still the time inside the call),
// and the session writes events in effect order.
//
// The watermark. A record reaches the reader in return order, so an event
// is out of place by at most its own duration when it is a release (a real
// cudaFree synchronizes the device: unbounded in principle), and any record
// by the time its thread spent preempted between reading the clock and
// writing the record. A fixed window cannot cover either on a loaded
// machine (a free preempted for a quarter second was seen here). The BPF
// side keeps, per thread, the entry time of its outermost traced call in
// flight (thread.since), cleared only once that call's record is in the
// ring buffer. The session reads the clock (T0), then every thread's since,
// and once the ring buffer has next been found empty, every event that
// took effect before min(T0, every since) has been read: none can arrive
// behind it (so also once the reader has read up to the ring position the
// producer had reached after the since values were read: see the bound).
// That bound (the mark) releases buffered events, exactly; it is applied about
// once per poll. Block-layer records (USDT probes, allocator specs) have
// no since: they are sent from the probe that reads their time, so only a
// preemption inside that probe can delay them, and then the window and the
// late count below still hold.
//
// The window is the fallback: an event is released anyway once the clock
// (the newest return time seen, or a reading taken before the ring buffer
// was found empty) is a window past it, so a call stuck in flight (a
// thread stopped in a debugger, an evicted thread entry) holds the others
// back no longer than that, and the mark ignores calls in flight for longer.
// An event that arrives after events that took effect later were written
// (a release still in flight after the window) is never dropped nor silently
// misplaced: it is written at once, where it arrives, and counted
// (event.Lost.Late), and every output says so as it says how many records
// were lost.

// DefaultReorderWindow is the longest a call in flight holds events back:
// two seconds covers a cudaFree that waits for the device to finish long
// kernels. The window delays the live status line and the trace on disk
// only while such a call is in flight.
const DefaultReorderWindow = 2_000_000_000 // ns

// The bound. A reader that is behind (a loaded machine, a burst beyond the
// rate it keeps up with) never finds the ring buffer empty. So the session
// also notes, as it reads the mark, the ring position the producer has
// reached (Session.takeMark): once the reader has read up to there, every
// record in the ring when the mark was read has been read, as when the ring
// is found empty, and the mark holds. Behind, the buffer then holds about
// the records of one ring, not a window's worth (376k at 188k events/s).
// The buffer also holds at most a limit of events, a ring's worth (see
// reorderLimit): past it the oldest go out early, and a release that arrives
// behind them is written where it arrives and counted late, as any late
// event. Memory is bounded by that limit, not by rate times window: the
// slot array never has more than limit+1 slots (an event.Event, 72 bytes), and
// it shrinks again once it has been mostly empty for a poll (trim).

// minRecordBytes is the fewest ring buffer bytes a record takes: the ring's
// 8-byte record header and the record header of the BPF contract (a record
// with no frames).
const minRecordBytes = 8 + recordHeaderSize

// reorderLimit is the most events the reorder buffer holds for a ring buffer
// of ringBytes: as many as the ring buffer itself holds records at most,
// 209,715 for the default 16 MiB (14.4 MiB of events). Events that
// could be reordered against each other were in the ring at the same time,
// unless the reader is behind by more than a ring, when records are lost
// anyway.
func reorderLimit(ringBytes int) int { return max(ringBytes/minRecordBytes, minReorderCap) }

// minReorderCap is the capacity the slot array starts at and never shrinks
// below: 4096 events (288 KiB) cover a poll's worth at a high rate.
const minReorderCap = 4096

// releases reports whether k is a release kind: it takes effect at entry.
func releases(k event.Kind) bool {
	switch k {
	case event.KindFree, event.KindHostFree, event.KindUnreserve, event.KindRelease, event.KindUnmap:
		return true
	}
	return false
}

// effectTime is when e took effect, e.Time being its return time: the entry
// (Time - Duration) for a release, the return for anything else.
func effectTime(e *event.Event) uint64 {
	if releases(e.Kind) && e.Duration <= e.Time {
		return e.Time - e.Duration
	}
	return e.Time
}

// reorder is the reorder buffer: the events buffered, sorted on effect time
// and, among equal times, on arrival (a thread's own calls, ordered by the
// thread already). Records arrive in return order, which is effect order
// but for releases (placed at their entry) and preempted threads: an event
// is inserted at most a few places from the newest end, found from there,
// and the oldest goes out from the other end, each in constant time. The
// array is circular, so neither end moves the others. It allocates only
// when it grows or shrinks. Not safe for concurrent use.
type reorder struct {
	window uint64
	// limit is the most events buffered (see reorderLimit): pop releases the
	// oldest once more are.
	limit int
	// slots is the circular array: n events from head, in order; its
	// length is its capacity.
	slots   []event.Event
	head, n int
	// peak is the most events buffered since the last trim.
	peak int
	// now is the clock the window runs on: the newest return time seen, or
	// a clock reading taken before the ring buffer was found empty.
	now uint64
	// mark: every event that took effect before it has been added (see
	// setMark).
	mark uint64
	// written is the effect time of the latest event written in order:
	// an event that took effect before it arrived too late.
	written uint64
	// late counts events that arrived too late, written out of order.
	late uint64
	out  event.Event // the event pop returns, valid until the next call
}

// newReorder returns a reorder buffer that holds events for up to window
// ns and at most limit events (reorderLimit).
func newReorder(window uint64, limit int) *reorder {
	return &reorder{window: window, limit: limit}
}

// at is the i-th event buffered, the oldest first.
func (r *reorder) at(i int) *event.Event { return &r.slots[r.phys(i)] }

// add takes an event as it arrives, its Time being its return time, and
// sets Time to its effect time. It holds the event and returns false, or,
// when the event took effect before events already written, returns true:
// the caller writes it at once (it is counted late).
func (r *reorder) add(e *event.Event) bool {
	ret := e.Time
	e.Time = effectTime(e)
	r.now = max(r.now, ret)
	if e.Time < r.written {
		r.late++
		return true
	}
	if r.n == len(r.slots) {
		r.resize(min(max(2*len(r.slots), minReorderCap), r.limit+1))
	}
	// Its place: after every event of its time or before (they arrived
	// first). Nearly always among the newest few.
	p := r.n
	for stop := max(p-insertScan, 0); p > stop && r.at(p-1).Time > e.Time; p-- {
	}
	if p > 0 && r.at(p-1).Time > e.Time {
		p = sort.Search(p, func(i int) bool { return r.at(i).Time > e.Time })
	}
	// Make room by moving the shorter side: the newer events one slot on,
	// or the older ones one slot back.
	if p >= r.n-p {
		r.moveUp(p)
	} else {
		r.head--
		if r.head < 0 {
			r.head += len(r.slots)
		}
		r.moveDown(p)
	}
	*r.at(p) = *e
	r.n++
	r.peak = max(r.peak, r.n)
	return false
}

// phys is the slot of the i-th event buffered.
func (r *reorder) phys(i int) int {
	j := r.head + i
	if j >= len(r.slots) {
		j -= len(r.slots)
	}
	return j
}

// moveUp moves the events at places p to n-1 one place on, a run of
// adjacent slots at a time, from the newest back.
func (r *reorder) moveUp(p int) {
	for i := r.n; i > p; {
		dst, src := r.phys(i), r.phys(i-1)
		if dst == 0 { // src is the last slot
			r.slots[0] = r.slots[src]
			i--
			continue
		}
		k := min(i-p, src+1)
		copy(r.slots[dst-k+1:dst+1], r.slots[src-k+1:src+1])
		i -= k
	}
}

// moveDown moves the events at places 1 to p one place back, a run of
// adjacent slots at a time, from the oldest on.
func (r *reorder) moveDown(p int) {
	for i := 0; i < p; {
		dst, src := r.phys(i), r.phys(i+1)
		if src == 0 { // dst is the last slot
			r.slots[dst] = r.slots[0]
			i++
			continue
		}
		k := min(p-i, len(r.slots)-src)
		copy(r.slots[dst:dst+k], r.slots[src:src+k])
		i += k
	}
}

// insertScan is how far add looks for an event's place one by one before
// it searches: a release that spent longer in its call than that many
// events took to arrive is found by bisection.
const insertScan = 16

// setMark tells that every event that took effect before m has been added:
// they can all go out.
func (r *reorder) setMark(m uint64) { r.mark = max(r.mark, m) }

// advance moves the window's clock to t (a clock reading taken before the
// ring buffer was found empty: every call that returned before it has been
// read).
func (r *reorder) advance(t uint64) { r.now = max(r.now, t) }

// resize moves the buffered events to an array of n slots (at least as many
// as are buffered), the oldest first: add would grow it past the limit, and
// never shrink it.
func (r *reorder) resize(n int) {
	buf := make([]event.Event, max(n, r.n))
	if r.n > 0 {
		k := copy(buf, r.slots[r.head:min(r.head+r.n, len(r.slots))])
		copy(buf[k:], r.slots[:r.n-k])
	}
	r.slots, r.head = buf, 0
}

// pop returns the next event due, in effect order, or nil when none is:
// due once it is before the mark or the clock is a window past it, or at
// once when more than the limit are buffered or all is true (the stream ends).
func (r *reorder) pop(all bool) *event.Event {
	if r.n == 0 {
		return nil
	}
	top := &r.slots[r.head]
	if !all && r.n <= r.limit && top.Time >= r.mark && top.Time+r.window > r.now {
		return nil
	}
	r.out = *top
	r.written = max(r.written, r.out.Time)
	r.head++
	if r.head == len(r.slots) {
		r.head = 0
	}
	r.n--
	return &r.out
}

// due reports whether an event that took effect at t would be due now
// (see pop), the limit aside: for records kept beside the held events
// (test phases, pytest.go).
func (r *reorder) due(t uint64) bool { return t < r.mark || t+r.window <= r.now }

// trim halves the array when no more than a quarter of it was used since
// the last trim, and no smaller than minReorderCap. Called about once a poll:
// the buffer fills between marks and empties at each, and an array resized
// with every fill would be garbage at the rate of events.
func (r *reorder) trim() {
	if c := len(r.slots); c > minReorderCap && r.peak < c/4 {
		r.resize(max(c/2, minReorderCap))
	}
	r.peak = r.n
}

// flushPID removes the buffered events of pid and returns them in effect order,
// valid until the next call. A process's events go out before a record that
// ends its instance (an exec, a PID reused): they were all its old image's.
// The high-water mark is left alone, so that other processes' events buffered
// meanwhile are not taken for late ones.
func (r *reorder) flushPID(pid uint32) []event.Event {
	var out []event.Event
	kept := 0 // filtered in place, in order: no second array of the buffered events
	for i := range r.n {
		e := r.at(i)
		if e.PID == pid {
			out = append(out, *e)
			continue
		}
		if kept != i {
			*r.at(kept) = *e
		}
		kept++
	}
	r.n = kept
	return out
}
