package analysis

import (
	"math"
	"sort"
)

// stamps is a list of (event sequence number, time) pairs in stream order,
// packed to 8 bytes a pair: each pair is two uint32 offsets from the base
// of its run. A pair whose offsets do not fit (over 4 s or 4G events after
// the run's base, or earlier than it: times may step back a few ns between
// CPUs) starts a new run. The per-stack logs hold one pair per event, so
// their size is most of the analyser's memory after the live allocations.
// Each pair carries a payload P beside it (struct{} for none): a log that
// records a value per pair keeps it in the same entry, so an append
// writes one array, not two (the logs are appended to at random, and each
// array's tail is a cache miss).
type stamps[P any] struct {
	// tail is the chunk being filled; full the chunks before it, in
	// order. The first chunk grows by doubling from 16 pairs up to
	// stampHalf, the second holds stampHalf, every later one
	// stampChunk: a log's chunks hold exactly what one slice doubled up
	// to stampChunk would, and the last doubling, which would copy half
	// a chunk and clear a whole one at a random stack, is not made.
	tail []stampOff[P]
	// seq and tm are the latest run's base (runs[len(runs)-1]), kept
	// beside tail: add reads them at every pair, and the runs' array is
	// one more cache miss.
	seq, tm uint64
	full    [][]stampOff[P]
	runs    []stampRun
}

// stampChunk is the pairs in a full chunk (stampShift its log2): 8 to 16
// KiB, allocated whole, so that a long log pays one allocation per
// thousand events and a short one never pays more than it had with one
// slice; stampHalf is half of it.
const (
	stampShift = 10
	stampChunk = 1 << stampShift
	stampHalf  = stampChunk / 2
)

// stampRun is the base of the pairs from index first on.
type stampRun struct {
	first   int
	seq, tm uint64
}

// stampOff is one pair's offsets and payload. The payload comes first: a
// zero-size last field is padded (its address must stay inside the
// entry), which made a pair without payload 12 bytes, not 8.
type stampOff[P any] struct {
	p       P
	seq, tm uint32
}

func (s *stamps[P]) len() int { return stampStart(len(s.full)) + len(s.tail) }

// stampStart is the index of chunk c's first pair.
func stampStart(c int) int {
	switch c {
	case 0:
		return 0
	case 1:
		return stampHalf
	}
	return (c - 1) << stampShift
}

// off returns pair i.
func (s *stamps[P]) off(i int) *stampOff[P] {
	var c, j int
	switch {
	case i < stampHalf:
		c, j = 0, i
	case i < stampChunk:
		c, j = 1, i-stampHalf
	default:
		c, j = i>>stampShift+1, i&(stampChunk-1)
	}
	if c < len(s.full) {
		return &s.full[c][j]
	}
	return &s.tail[j]
}

// add appends a pair with its payload.
func (s *stamps[P]) add(seq, t uint64, p P) {
	if len(s.runs) > 0 && seq >= s.seq && seq-s.seq <= math.MaxUint32 && t >= s.tm && t-s.tm <= math.MaxUint32 {
		s.push(stampOff[P]{p, uint32(seq - s.seq), uint32(t - s.tm)})
		return
	}
	s.runs = append(s.runs, stampRun{first: s.len(), seq: seq, tm: t})
	s.seq, s.tm = seq, t
	s.push(stampOff[P]{p: p})
}

// push appends an entry to the tail.
func (s *stamps[P]) push(o stampOff[P]) {
	if len(s.tail) == cap(s.tail) {
		s.grow()
	}
	s.tail = append(s.tail, o)
}

// grow makes room in the tail: doubles the first chunk while it is
// shorter than stampHalf; else the tail joins full and the next chunk
// starts. It runs once per chunk: not inlined, so that push is.
//
//go:noinline
func (s *stamps[P]) grow() {
	if len(s.full) == 0 && len(s.tail) < stampHalf {
		s.tail = doubled(s.tail, stampHalf)
		return
	}
	s.full = append(s.full, s.tail)
	size := stampChunk
	if len(s.full) == 1 {
		size = stampHalf
	}
	s.tail = make([]stampOff[P], 0, size)
}

// payload returns pair i's payload.
func (s *stamps[P]) payload(i int) P { return s.off(i).p }

// doubled returns s with twice the capacity (at least 16, at most limit):
// a log that grows by one entry per event to tens of thousands copied each
// entry about four times over with append's growth by a quarter.
func doubled[T any](s []T, limit int) []T {
	g := make([]T, len(s), min(max(16, 2*cap(s)), limit))
	copy(g, s)
	return g
}

// at returns pair i.
func (s *stamps[P]) at(i int) (seq, t uint64) {
	j := sort.Search(len(s.runs), func(j int) bool { return s.runs[j].first > i }) - 1
	r, o := &s.runs[j], s.off(i)
	return r.seq + uint64(o.seq), r.tm + uint64(o.tm)
}

// search returns the index of the first pair whose seq is at least seq
// (len when none): seqs increase along the list.
func (s *stamps[P]) search(seq uint64) int {
	return sort.Search(s.len(), func(i int) bool {
		q, _ := s.at(i)
		return q >= seq
	})
}

// lastAtOrBefore returns the index of the latest pair in stream order
// stamped at or before t, or -1.
func (s *stamps[P]) lastAtOrBefore(t uint64) int {
	end := s.len()
	for j := len(s.runs) - 1; j >= 0; j-- {
		r := &s.runs[j]
		for i := end - 1; i >= r.first; i-- {
			if r.tm+uint64(s.off(i).tm) <= t {
				return i
			}
		}
		end = r.first
	}
	return -1
}

// unpack returns the seqs and times.
func (s *stamps[P]) unpack() (seqs, times []uint64) {
	n := s.len()
	seqs, times = make([]uint64, n), make([]uint64, n)
	for j, r := range s.runs {
		end := n
		if j+1 < len(s.runs) {
			end = s.runs[j+1].first
		}
		for i := r.first; i < end; i++ {
			o := s.off(i)
			seqs[i], times[i] = r.seq+uint64(o.seq), r.tm+uint64(o.tm)
		}
	}
	return seqs, times
}
