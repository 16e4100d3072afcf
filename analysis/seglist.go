package analysis

import (
	"iter"
	"slices"
)

// segChunk is the most segments one chunk of a segList holds before it
// splits: a segment coming or going shifts at most this many addresses
// and pointers, where one sorted slice shifted half the pool's segments.
// Chunks are found by binary search over their first addresses (one
// array), so a pool of a million segments has some twenty thousand chunks
// to search, in 15 steps; the shifts, not the search, were the cost at 256.
const segChunk = 64

// segList is a pool's live segments sorted by address, kept in chunks so
// that an insert or a delete costs O(log n + segChunk), not O(n). The zero
// value is empty. Equal addresses keep their order of insertion.
type segList struct {
	// chunks are non-empty and sorted: every segment of chunks[i] starts
	// at or below every segment of chunks[i+1]. firsts are their first
	// addresses, apart: the search reads one array, not a segment per
	// step.
	chunks []segRun
	firsts []uint64
	n      int
	// spare are the arrays of chunks that emptied, for the next split to
	// reuse: segments come and go all along in a training loop, and a
	// pair of arrays per split was most of the pools' garbage. They are
	// at most as many as chunks were ever live at once.
	spare []segRun
	// hot is the segment at last found, when no later segment starts
	// inside it (at gives it for any address it holds, without a
	// search: consecutive blocks mostly lie in one segment); nil when
	// unknown.
	hot *poolSegment
}

// segRun is one chunk: its segments and, apart, their addresses (the
// search within the chunk reads them without touching the segments).
// addrs and segs are windows of the arrays abuf and segBuf hold from their
// start: a segment removed in the front half of a chunk is sliced off,
// the few before it shifted up, and an insert with no room after the
// window moves it back to the start. Segments are freed in address order
// as often as not, and shifting the rest of the chunk at each was a
// fifth of the pools' time.
type segRun struct {
	addrs []uint64
	segs  []*poolSegment
	// abuf and sbuf are addrs' and segs' arrays, from their start (length
	// 0).
	abuf []uint64
	sbuf []*poolSegment
}

// newSegRun returns a chunk over the given arrays, their whole length.
func newSegRun(addrs []uint64, segs []*poolSegment) segRun {
	return segRun{addrs: addrs, segs: segs, abuf: addrs[:0], sbuf: segs[:0]}
}

// insertAt puts s at index j of the chunk.
func (c *segRun) insertAt(j int, s *poolSegment) {
	if n := len(c.addrs); n == cap(c.addrs) && cap(c.abuf) > n {
		// No room after the window, some before it: move it back to
		// the start.
		copy(c.abuf[:n], c.addrs)
		copy(c.sbuf[:n], c.segs)
		clear(c.sbuf[n:cap(c.sbuf)])
		c.addrs, c.segs = c.abuf[:n], c.sbuf[:n]
	}
	ca, cs := cap(c.addrs), cap(c.segs)
	// Written out, not slices.Insert: it appends a one-element slice,
	// and most inserts are at the end (rising addresses).
	c.addrs = append(c.addrs, 0)
	copy(c.addrs[j+1:], c.addrs[j:])
	c.addrs[j] = s.addr
	c.segs = append(c.segs, nil)
	copy(c.segs[j+1:], c.segs[j:])
	c.segs[j] = s
	if cap(c.addrs) != ca {
		c.abuf = c.addrs[:0] // a new array: it starts at the window
	}
	if cap(c.segs) != cs {
		c.sbuf = c.segs[:0]
	}
}

// removeAt deletes index j of the chunk, shifting its shorter side.
func (c *segRun) removeAt(j int) {
	if j < len(c.addrs)/2 {
		copy(c.addrs[1:j+1], c.addrs[:j])
		copy(c.segs[1:j+1], c.segs[:j])
		c.segs[0] = nil
		c.addrs, c.segs = c.addrs[1:], c.segs[1:]
		return
	}
	c.addrs = slices.Delete(c.addrs, j, j+1)
	c.segs = slices.Delete(c.segs, j, j+1)
}

// len is the number of segments.
func (l *segList) len() int { return l.n }

// chunkFor is the index of the last chunk whose first segment starts at
// or below addr (0 when none does); -1 when the list is empty.
func (l *segList) chunkFor(addr uint64) int {
	if len(l.chunks) == 0 {
		return -1
	}
	return max(searchAbove(l.firsts, addr)-1, 0)
}

// searchAbove is the index of the first address in xs above addr (len
// when none is): sort.Search, written out, since it runs for every block
// event and a closure call per step cost a tenth of it.
func searchAbove(xs []uint64, addr uint64) int {
	lo, hi := 0, len(xs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if xs[m] > addr {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// locate returns the chunk and index of the last segment starting at or
// below addr, and whether it holds addr.
func (l *segList) locate(addr uint64) (ci, j int, ok bool) {
	ci = l.chunkFor(addr)
	if ci < 0 {
		return 0, 0, false
	}
	c := &l.chunks[ci]
	j = searchAbove(c.addrs, addr) - 1
	return ci, j, j >= 0 && addr < c.addrs[j]+c.segs[j].size
}

// at returns the live segment holding addr; nil when none does.
func (l *segList) at(addr uint64) *poolSegment {
	if h := l.hot; h != nil && addr >= h.addr && addr < h.addr+h.size {
		return h
	}
	ci, j, ok := l.locate(addr)
	if !ok {
		return nil
	}
	c := &l.chunks[ci]
	s := c.segs[j]
	// Cache it only when the next segment starts at or past its end:
	// then it is the answer for every address it holds.
	switch {
	case j+1 < len(c.addrs):
		if c.addrs[j+1] >= s.addr+s.size {
			l.hot = s
		}
	case ci+1 < len(l.chunks):
		if l.firsts[ci+1] >= s.addr+s.size {
			l.hot = s
		}
	default:
		l.hot = s
	}
	return s
}

// insert adds s after every segment starting at or below its address.
func (l *segList) insert(s *poolSegment) {
	if h := l.hot; h != nil && s.addr >= h.addr && s.addr < h.addr+h.size {
		l.hot = nil // s starts inside it: s comes first for what follows
	}
	l.n++
	// Segments mostly come at rising addresses: past the last chunk's
	// first, it is the one, without a search.
	ci := len(l.chunks) - 1
	if ci > 0 && s.addr < l.firsts[ci] {
		ci = l.chunkFor(s.addr)
	}
	if ci < 0 {
		l.chunks = append(l.chunks, newSegRun([]uint64{s.addr}, []*poolSegment{s}))
		l.firsts = append(l.firsts, s.addr)
		return
	}
	c := &l.chunks[ci]
	j := len(c.addrs)
	if s.addr < c.addrs[j-1] {
		j = searchAbove(c.addrs, s.addr)
	}
	c.insertAt(j, s)
	l.firsts[ci] = c.addrs[0]
	if len(c.segs) <= segChunk {
		return
	}
	half := len(c.segs) / 2
	// The new chunk gets room to fill up to the next split: a clone of
	// its half would grow at its first insert.
	rest := l.newRun(len(c.addrs) - half)
	copy(rest.addrs, c.addrs[half:])
	copy(rest.segs, c.segs[half:])
	clear(c.segs[half:])
	c.addrs, c.segs = c.addrs[:half], c.segs[:half]
	l.chunks = slices.Insert(l.chunks, ci+1, rest)
	l.firsts = slices.Insert(l.firsts, ci+1, rest.addrs[0])
}

// newRun returns a chunk of n segments (to be filled) with room to fill
// up to the next split, a spare one when there is.
func (l *segList) newRun(n int) segRun {
	if k := len(l.spare); k > 0 {
		r := l.spare[k-1]
		l.spare[k-1] = segRun{}
		l.spare = l.spare[:k-1]
		return segRun{addrs: r.abuf[:n], segs: r.sbuf[:n], abuf: r.abuf, sbuf: r.sbuf}
	}
	return newSegRun(make([]uint64, n, segChunk+1), make([]*poolSegment, n, segChunk+1))
}

// remove deletes and returns the segment holding addr when it starts
// exactly there; nil otherwise.
func (l *segList) remove(addr uint64) *poolSegment {
	ci, j, ok := l.locate(addr)
	if !ok || l.chunks[ci].addrs[j] != addr {
		return nil
	}
	return l.removeAt(ci, j)
}

// removeAt deletes and returns segment j of chunk ci (from locate).
func (l *segList) removeAt(ci, j int) *poolSegment {
	l.n--
	c := &l.chunks[ci]
	s := c.segs[j]
	if s == l.hot {
		l.hot = nil
	}
	c.removeAt(j)
	if len(c.segs) == 0 {
		if cap(c.abuf) > segChunk && cap(c.sbuf) > segChunk {
			l.spare = append(l.spare, *c)
		}
		l.chunks = slices.Delete(l.chunks, ci, ci+1)
		l.firsts = slices.Delete(l.firsts, ci, ci+1)
	} else {
		l.firsts[ci] = c.addrs[0]
	}
	return s
}

// all yields the segments in address order. The list must not change
// during the iteration.
func (l *segList) all() iter.Seq[*poolSegment] {
	return func(yield func(*poolSegment) bool) {
		for _, c := range l.chunks {
			for _, s := range c.segs {
				if !yield(s) {
					return
				}
			}
		}
	}
}

// build replaces the list with segs, which it sorts by address (stably,
// as inserts keep equal addresses).
func (l *segList) build(segs []*poolSegment) {
	slices.SortStableFunc(segs, func(x, y *poolSegment) int {
		switch {
		case x.addr < y.addr:
			return -1
		case x.addr > y.addr:
			return 1
		}
		return 0
	})
	l.chunks, l.firsts, l.n, l.hot = nil, nil, len(segs), nil
	for len(segs) > 0 {
		n := min(len(segs), segChunk/2)
		run := newSegRun(make([]uint64, n), segs[:n:n])
		for i, s := range run.segs {
			run.addrs[i] = s.addr
		}
		l.chunks = append(l.chunks, run)
		l.firsts = append(l.firsts, run.addrs[0])
		segs = segs[n:]
	}
}
