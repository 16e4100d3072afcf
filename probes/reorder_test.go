//go:build linux

package probes

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// record is a synthetic record as the BPF side sends it: Time is its return.
func record(kind event.Kind, tid uint32, entry, ret, addr uint64) event.Event {
	api := event.APICudaMalloc
	if kind == event.KindFree {
		api = event.APICudaFree
	}
	return event.Event{Time: ret, Duration: ret - entry, Addr: addr, Size: 1 << 20, PID: 7, TID: tid,
		Device: 0, Kind: kind, Layer: event.LayerSegment, API: api}
}

// feed passes records to r in arrival order, then advances its clock to
// now and returns what it released (Time: effect time) and what it
// returned as late, in the order a session writes them.
func feed(r *reorder, now uint64, in ...event.Event) (out []event.Event, late []event.Event) {
	for _, e := range in {
		if r.add(&e) {
			late = append(late, e)
			out = append(out, e)
		}
		for ev := r.pop(false); ev != nil; ev = r.pop(false) {
			out = append(out, *ev)
		}
	}
	r.advance(now)
	for ev := r.pop(false); ev != nil; ev = r.pop(false) {
		out = append(out, *ev)
	}
	return out, late
}

type step struct {
	kind event.Kind
	tid  uint32
	time uint64 // effect time
}

func steps(evs []event.Event) []step {
	var out []step
	for _, e := range evs {
		out = append(out, step{e.Kind, e.TID, e.Time})
	}
	return out
}

func TestReorderEffectOrder(t *testing.T) {
	const P = 0x7f2000000000
	alloc, free := event.KindAlloc, event.KindFree
	tests := []struct {
		name string
		in   []event.Event // arrival (return) order
		want []step
	}{
		{
			// Thread 1 frees P (entry 100, return 300); thread 2 got P
			// back from cudaMalloc at 200: its record arrived first.
			name: "free returns after the reallocation",
			in:   []event.Event{record(alloc, 2, 150, 200, P), record(free, 1, 100, 300, P)},
			want: []step{{free, 1, 100}, {alloc, 2, 200}},
		},
		{
			// A thread's own alloc then free: the free enters after the
			// alloc returned, so their order stands.
			name: "one thread's pair",
			in:   []event.Event{record(alloc, 1, 10, 20, P), record(free, 1, 20, 40, P)},
			want: []step{{alloc, 1, 20}, {free, 1, 20}},
		},
		{
			name: "allocations keep their return order",
			in:   []event.Event{record(alloc, 1, 5, 30, P), record(alloc, 2, 1, 31, P+1), record(alloc, 3, 29, 32, P+2)},
			want: []step{{alloc, 1, 30}, {alloc, 2, 31}, {alloc, 3, 32}},
		},
		{
			// Releases of every kind go at their entry.
			name: "every release kind",
			in: []event.Event{
				record(alloc, 9, 0, 100, P),
				record(event.KindHostFree, 1, 10, 101, P), record(event.KindUnreserve, 2, 20, 102, P),
				record(event.KindRelease, 3, 30, 103, P), record(event.KindUnmap, 4, 40, 104, P),
				record(event.KindFree, 5, 50, 105, P),
			},
			want: []step{{event.KindHostFree, 1, 10}, {event.KindUnreserve, 2, 20}, {event.KindRelease, 3, 30},
				{event.KindUnmap, 4, 40}, {event.KindFree, 5, 50}, {alloc, 9, 100}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newReorder(1000, reorderLimit(16<<20))
			out, late := feed(r, 1_000_000, tc.in...)
			assert.Empty(t, late, "late")
			assert.Equal(t, tc.want, steps(out))
			assert.Zero(t, r.late)
			assert.Zero(t, r.n)
		})
	}
}

// TestReorderWindow: nothing goes out before the clock is a window past it,
// and the clock moves with arrivals (return times) and with advance.
func TestReorderWindow(t *testing.T) {
	r := newReorder(100, reorderLimit(16<<20))
	e := record(event.KindAlloc, 1, 0, 1000, 0x1000)
	require.False(t, r.add(&e))
	assert.Nil(t, r.pop(false), "buffered: the clock is at 1000")
	r.advance(1099)
	assert.Nil(t, r.pop(false), "buffered: 1099 < 1000 + window")
	r.advance(1100)
	got := r.pop(false)
	require.NotNil(t, got)
	assert.Equal(t, uint64(1000), got.Time)

	// An arrival moves the clock: its return time.
	a := record(event.KindAlloc, 1, 0, 2000, 0x2000)
	b := record(event.KindAlloc, 1, 0, 2100, 0x3000)
	require.False(t, r.add(&a))
	require.False(t, r.add(&b))
	got = r.pop(false)
	require.NotNil(t, got)
	assert.Equal(t, uint64(0x2000), got.Addr)
	assert.Nil(t, r.pop(false))
	// The stream's end releases everything.
	got = r.pop(true)
	require.NotNil(t, got)
	assert.Equal(t, uint64(0x3000), got.Addr)
	assert.Nil(t, r.pop(true))
}

// TestReorderLate: a free longer than the window arrives after the
// reallocation of its address was written. It is not dropped: add returns
// it to be written at once, and it is counted.
func TestReorderLate(t *testing.T) {
	const P = 0x7f2000000000
	r := newReorder(100, reorderLimit(16<<20))
	realloc := record(event.KindAlloc, 2, 1500, 2000, P)
	other := record(event.KindAlloc, 3, 4000, 5000, P+1<<20)
	slowFree := record(event.KindFree, 1, 1000, 5200, P) // 4.2 us inside, window 100 ns
	out, late := feed(r, 10_000, realloc, other, slowFree)
	require.Len(t, late, 1)
	assert.Equal(t, uint64(1000), late[0].Time, "its effect time, kept")
	assert.Equal(t, uint64(1), r.late)
	assert.Equal(t, []step{{event.KindAlloc, 2, 2000}, {event.KindFree, 1, 1000}, {event.KindAlloc, 3, 5000}}, steps(out),
		"written where it arrived")

	// Within the window the same arrivals come out in effect order.
	r = newReorder(10_000, reorderLimit(16<<20))
	out, late = feed(r, 100_000, realloc, other, slowFree)
	assert.Empty(t, late)
	assert.Equal(t, []step{{event.KindFree, 1, 1000}, {event.KindAlloc, 2, 2000}, {event.KindAlloc, 3, 5000}}, steps(out))
}

// TestReorderFlushPID: a process's buffered events go out (in effect order)
// before a record that ends its instance; other processes' stay buffered and
// are not taken for late afterwards.
func TestReorderFlushPID(t *testing.T) {
	r := newReorder(1<<40, reorderLimit(16<<20))
	a := record(event.KindAlloc, 1, 0, 300, 0x1)
	b := record(event.KindFree, 1, 100, 400, 0x2) // effect 100
	c := record(event.KindAlloc, 2, 0, 200, 0x3)
	c.PID = 8
	for _, e := range []event.Event{a, b, c} {
		require.False(t, r.add(&e))
	}
	got := r.flushPID(7)
	assert.Equal(t, []step{{event.KindFree, 1, 100}, {event.KindAlloc, 1, 300}}, steps(got))
	assert.Nil(t, r.flushPID(7))
	require.Equal(t, 1, r.n)
	late := record(event.KindAlloc, 2, 0, 250, 0x4)
	late.PID = 8
	assert.False(t, r.add(&late), "pid 8's events are not late for pid 7's flush")
	first := *r.pop(true) // pop's event is valid until the next call
	second := *r.pop(true)
	assert.Equal(t, []step{{event.KindAlloc, 2, 200}, {event.KindAlloc, 2, 250}}, steps([]event.Event{first, second}))
}

// TestReorderRepairsChurn replays a churn of many threads on one address,
// in the order the records arrive (their returns), through the reorder
// buffer into the analysis: every free matches its allocation. Without the
// reorder the same stream replaces live allocations and ends with nothing live.
func TestReorderRepairsChurn(t *testing.T) {
	const P = 0x7f2000000000
	// Thread i frees P (entry at 10i + 1, return at 10i + 9), and thread
	// i + 1 gets P back at 10i + 5: its return comes first.
	in := []event.Event{record(event.KindAlloc, 0, 0, 1, P)}
	for i := uint64(0); i < 1000; i++ {
		in = append(in, record(event.KindAlloc, uint32(i+1), 10*i+2, 10*i+5, P),
			record(event.KindFree, uint32(i), 10*i+1, 10*i+9, P))
	}
	analyse := func(evs []event.Event) analysis.Totals {
		a := analysis.New(analysis.Options{})
		require.NoError(t, a.Add(&event.Header{Version: event.Version, Mode: "run", PID: 7}))
		require.NoError(t, a.Add(&event.Process{PID: 7}))
		for i := range evs {
			require.NoError(t, a.Add(&evs[i]))
		}
		return a.Finish().Totals
	}

	raw := analyse(in)
	assert.NotZero(t, raw.ReplacedAllocations, "in return order, allocations replace live ones")
	assert.Zero(t, raw.LiveBytesAtEnd, "in return order, the last allocation is freed by the free before it")

	out, late := feed(newReorder(100, reorderLimit(16<<20)), 1<<40, in...)
	require.Empty(t, late)
	tt := analyse(out)
	assert.Equal(t, uint64(1001), tt.Allocations)
	assert.Equal(t, uint64(1000), tt.Frees)
	assert.Zero(t, tt.UnknownFrees)
	assert.Zero(t, tt.ReplacedAllocations)
	assert.Equal(t, uint64(1<<20), tt.LiveBytesAtEnd)
}

// TestReorderMark: the watermark releases what took effect before it, long
// before the window would, and nothing at or after it.
func TestReorderMark(t *testing.T) {
	r := newReorder(1<<40, reorderLimit(16<<20))
	free := record(event.KindFree, 1, 100, 900, 0x1) // effect 100
	alloc := record(event.KindAlloc, 2, 150, 200, 0x1)
	for _, e := range []event.Event{alloc, free} {
		require.False(t, r.add(&e))
	}
	r.setMark(150)
	got := r.pop(false)
	require.NotNil(t, got)
	assert.Equal(t, uint64(100), got.Time)
	assert.Nil(t, r.pop(false), "200 is not before the mark")
	r.setMark(120) // a mark never moves back
	assert.Nil(t, r.pop(false))
	r.setMark(201)
	got = r.pop(false)
	require.NotNil(t, got)
	assert.Equal(t, uint64(200), got.Time)
}

// TestReorderBound drives the buffer past its limit, as a reader that is
// behind does (the clock never a window past the buffered events, no mark): it
// never holds more than the limit, its array never has more slots than the
// limit and one, every event comes out once and in order, a release that
// arrives behind the events pushed out is written at once and counted
// late, and once drained the array is back to its smallest.
func TestReorderBound(t *testing.T) {
	const limit = 3 * minReorderCap
	const n = 4 * limit
	r := newReorder(1<<62, limit)
	var out []event.Event
	pop := func() {
		for ev := r.pop(false); ev != nil; ev = r.pop(false) {
			out = append(out, *ev)
		}
	}
	for i := uint64(1); i <= n; i++ {
		e := record(event.KindAlloc, 1, 10*i-1, 10*i, i)
		require.False(t, r.add(&e), "in order: never late")
		pop()
		require.LessOrEqual(t, r.n, limit, "after %d events", i)
		require.LessOrEqual(t, len(r.slots), limit+1, "after %d events", i)
	}
	assert.Len(t, out, n-limit, "the oldest went out, one per event past the limit")
	assert.Zero(t, r.late)

	// A free that entered before everything written so far returns now:
	// too late for its place, written where it arrives, and counted.
	free := record(event.KindFree, 2, 5, 10*n+1, 0xdead)
	require.True(t, r.add(&free), "late: returned to be written at once")
	out = append(out, free)
	assert.Equal(t, uint64(1), r.late)

	for ev := r.pop(true); ev != nil; ev = r.pop(true) {
		out = append(out, *ev)
	}
	require.Len(t, out, n+1, "nothing dropped")
	var allocs []uint64
	for i, e := range out {
		if e.Kind == event.KindAlloc {
			allocs = append(allocs, e.Addr)
		} else {
			assert.Equal(t, n-limit, i, "the late free where it arrived")
		}
	}
	for i, a := range allocs {
		require.Equal(t, uint64(i+1), a, "effect order")
	}
	assert.Zero(t, r.n)
	for range 4 {
		r.trim() // a poll each
	}
	assert.Equal(t, minReorderCap, len(r.slots), "shrunk once drained")
}

// TestReorderMatchesSort checks the buffer against the plainest model of
// its contract: events buffered in a slice sorted on effect time, arrival
// order among equal times,
// the oldest due one going out first. Random traffic covers the ways an
// event finds its place: at the newest end, a few places back, and far
// back (a release long in its call: bisection, the older side moved), in
// a circular array that wraps, grows, shrinks (trim) and hits its limit,
// with marks, clock moves, flushes of a process and late events.
func TestReorderMatchesSort(t *testing.T) {
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 21))
		limit := minReorderCap + rng.IntN(3*minReorderCap)
		window := uint64(1 + rng.IntN(200_000))
		r := newReorder(window, limit)
		m := &sortedModel{window: window, limit: limit}
		var got, want []event.Event
		now := uint64(1_000_000)
		for i := range 40_000 {
			now += uint64(rng.IntN(20))
			kind := event.KindAlloc
			if rng.IntN(2) == 0 {
				kind = event.KindFree
			}
			dur := uint64(rng.IntN(50))
			switch rng.IntN(100) {
			case 0:
				dur = uint64(rng.IntN(100_000)) // far back
			case 1, 2:
				dur = uint64(rng.IntN(2000))
			}
			e := record(kind, uint32(1+rng.IntN(16)), now-min(dur, now), now, uint64(i))
			e.PID = uint32(7 + rng.IntN(3))
			e2 := e
			if r.add(&e) {
				got = append(got, e)
			}
			if m.add(&e2) {
				want = append(want, e2)
			}
			switch rng.IntN(5000) {
			case 0:
				mark := now - uint64(rng.IntN(200_000))
				r.setMark(mark)
				m.mark = max(m.mark, mark)
			case 1:
				got = append(got, r.flushPID(8)...)
				want = append(want, m.flushPID(8)...)
			case 2:
				r.advance(now + uint64(rng.IntN(100_000)))
				m.now = max(m.now, r.now)
			case 3, 4, 5:
				r.trim()
			}
			all := rng.IntN(20_000) == 0
			for ev := r.pop(all); ev != nil; ev = r.pop(all) {
				got = append(got, *ev)
			}
			for ev := m.pop(all); ev != nil; ev = m.pop(all) {
				want = append(want, *ev)
			}
			require.LessOrEqual(t, len(r.slots), limit+1)
		}
		for ev := r.pop(true); ev != nil; ev = r.pop(true) {
			got = append(got, *ev)
		}
		for ev := m.pop(true); ev != nil; ev = m.pop(true) {
			want = append(want, *ev)
		}
		require.Equal(t, len(want), len(got), "seed %d", seed)
		for i := range want {
			require.Equal(t, want[i], got[i], "seed %d, event %d", seed, i)
		}
		require.Equal(t, m.late, r.late, "seed %d", seed)
		for range 4 {
			r.trim()
		}
		require.Equal(t, minReorderCap, len(r.slots), "seed %d: shrunk once drained", seed)
	}
}

// sortedModel is the reorder buffer's contract at its plainest: a slice
// kept sorted on effect time, arrival order among equal times.
type sortedModel struct {
	window             uint64
	limit              int
	buf                []event.Event
	now, mark, written uint64
	late               uint64
	out                event.Event
}

func (m *sortedModel) add(e *event.Event) bool {
	ret := e.Time
	e.Time = effectTime(e)
	m.now = max(m.now, ret)
	if e.Time < m.written {
		m.late++
		return true
	}
	// After every event of its time or before: they arrived first.
	i, _ := slices.BinarySearchFunc(m.buf, e.Time+1, func(h event.Event, t uint64) int { return cmp.Compare(h.Time, t) })
	m.buf = slices.Insert(m.buf, i, *e)
	return false
}

func (m *sortedModel) pop(all bool) *event.Event {
	if len(m.buf) == 0 {
		return nil
	}
	top := m.buf[0]
	if !all && len(m.buf) <= m.limit && top.Time >= m.mark && top.Time+m.window > m.now {
		return nil
	}
	m.out = top
	m.written = max(m.written, top.Time)
	m.buf = m.buf[1:]
	return &m.out
}

func (m *sortedModel) flushPID(pid uint32) []event.Event {
	var out, keep []event.Event
	for _, e := range m.buf {
		if e.PID == pid {
			out = append(out, e)
		} else {
			keep = append(keep, e)
		}
	}
	m.buf = keep
	return out
}

// TestReorderLimit: the default ring holds at most 16 MiB / 80 B records, and
// so many events at most are buffered.
func TestReorderLimit(t *testing.T) {
	assert.Equal(t, (16<<20)/(8+72), reorderLimit(16<<20))
	assert.Equal(t, minReorderCap, reorderLimit(4096), "never below the array's smallest")
}
