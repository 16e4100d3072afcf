package analysis

import (
	"iter"
	"slices"
)

// segChunk is the most segments one chunk of a segList holds before it
// splits: a segment coming or going shifts at most this many pointers
// (a few KiB), where one sorted slice shifted half the pool's segments.
// Chunks are found by binary search over their first addresses, so a
// pool of a million segments has a few thousand chunks to search.
const segChunk = 256

// segList is a pool's live segments sorted by address, kept in chunks so
// that an insert or a delete costs O(log n + segChunk), not O(n). The zero
// value is empty. Equal addresses keep their order of insertion.
type segList struct {
	// chunks are non-empty and sorted: every segment of chunks[i] starts
	// at or below every segment of chunks[i+1].
	chunks [][]*poolSegment
	n      int
	// hot is the segment at last found, when no later segment starts
	// inside it (at gives it for any address it holds, without a
	// search: consecutive blocks mostly lie in one segment); nil when
	// unknown.
	hot *poolSegment
}

// len is the number of segments.
func (l *segList) len() int { return l.n }

// chunkFor is the index of the last chunk whose first segment starts at
// or below addr (0 when none does); -1 when the list is empty.
func (l *segList) chunkFor(addr uint64) int {
	if len(l.chunks) == 0 {
		return -1
	}
	return max(searchChunks(l.chunks, addr)-1, 0)
}

// searchChunks is the index of the first chunk whose first segment starts
// above addr (len when none does): sort.Search, written out, since it runs
// for every block event and a closure call per step cost a tenth of it.
func searchChunks(chunks [][]*poolSegment, addr uint64) int {
	lo, hi := 0, len(chunks)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if chunks[m][0].addr > addr {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// searchSegs is the index of the first segment of c that starts above
// addr (len when none does).
func searchSegs(c []*poolSegment, addr uint64) int {
	lo, hi := 0, len(c)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if c[m].addr > addr {
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
	c := l.chunks[ci]
	j = searchSegs(c, addr) - 1
	return ci, j, j >= 0 && addr < c[j].addr+c[j].size
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
	c := l.chunks[ci]
	s := c[j]
	// Cache it only when the next segment starts at or past its end:
	// then it is the answer for every address it holds.
	switch {
	case j+1 < len(c):
		if c[j+1].addr >= s.addr+s.size {
			l.hot = s
		}
	case ci+1 < len(l.chunks):
		if l.chunks[ci+1][0].addr >= s.addr+s.size {
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
	ci := l.chunkFor(s.addr)
	if ci < 0 {
		l.chunks = append(l.chunks, []*poolSegment{s})
		return
	}
	c := l.chunks[ci]
	j := searchSegs(c, s.addr)
	c = slices.Insert(c, j, s)
	if len(c) <= segChunk {
		l.chunks[ci] = c
		return
	}
	half := len(c) / 2
	rest := slices.Clone(c[half:])
	clear(c[half:])
	l.chunks[ci] = c[:half]
	l.chunks = slices.Insert(l.chunks, ci+1, rest)
}

// remove deletes and returns the segment holding addr when it starts
// exactly there; nil otherwise.
func (l *segList) remove(addr uint64) *poolSegment {
	ci, j, ok := l.locate(addr)
	if !ok || l.chunks[ci][j].addr != addr {
		return nil
	}
	return l.removeAt(ci, j)
}

// removeAt deletes and returns segment j of chunk ci (from locate).
func (l *segList) removeAt(ci, j int) *poolSegment {
	l.n--
	c := l.chunks[ci]
	s := c[j]
	if s == l.hot {
		l.hot = nil
	}
	c = slices.Delete(c, j, j+1)
	if len(c) == 0 {
		l.chunks = slices.Delete(l.chunks, ci, ci+1)
	} else {
		l.chunks[ci] = c
	}
	return s
}

// all yields the segments in address order. The list must not change
// during the iteration.
func (l *segList) all() iter.Seq[*poolSegment] {
	return func(yield func(*poolSegment) bool) {
		for _, c := range l.chunks {
			for _, s := range c {
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
	l.chunks, l.n, l.hot = nil, len(segs), nil
	for len(segs) > 0 {
		n := min(len(segs), segChunk/2)
		l.chunks = append(l.chunks, segs[:n:n])
		segs = segs[n:]
	}
}
