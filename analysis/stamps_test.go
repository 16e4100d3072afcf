package analysis

import (
	"math/bits"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// TestStampSizes pins the stamps' entry sizes: 8 bytes a pair, 16 with a
// uint64 payload (they are most of the analyser's memory after the live
// allocations).
func TestStampSizes(t *testing.T) {
	assert.Equal(t, uintptr(8), unsafe.Sizeof(stampOff[struct{}]{}))
	assert.Equal(t, uintptr(16), unsafe.Sizeof(stampOff[uint64]{}))
}

// TestStampsAcrossChunks fills a log over several chunks and two runs (a
// time over 4 s past the first run's base starts the second) and reads the
// pairs back.
func TestStampsAcrossChunks(t *testing.T) {
	const n = 3*stampChunk + 17
	var s stamps[uint64]
	seqOf := func(i int) uint64 { return uint64(2*i + 1) }
	timeOf := func(i int) uint64 {
		if i >= 2*stampChunk {
			return uint64(10*i) + 5e9 // over 4 s past the run's base: a new run
		}
		return uint64(10 * i)
	}
	for i := range n {
		s.add(seqOf(i), timeOf(i), uint64(i)*3)
	}
	assert.Equal(t, n, s.len())
	assert.Len(t, s.runs, 2)
	for _, i := range []int{0, 1, stampChunk - 1, stampChunk, 2*stampChunk - 1, 2 * stampChunk, n - 1} {
		seq, tm := s.at(i)
		assert.Equal(t, seqOf(i), seq, "seq %d", i)
		assert.Equal(t, timeOf(i), tm, "time %d", i)
		assert.Equal(t, uint64(i)*3, s.payload(i), "payload %d", i)
		assert.Equal(t, i, s.search(seqOf(i)), "search %d", i)
		assert.Equal(t, i, s.lastAtOrBefore(timeOf(i)), "lastAtOrBefore %d", i)
	}
	seqs, times := s.unpack()
	for i := range n {
		if seqs[i] != seqOf(i) || times[i] != timeOf(i) {
			t.Fatalf("unpack %d: got (%d, %d), want (%d, %d)", i, seqs[i], times[i], seqOf(i), timeOf(i))
		}
	}
}

// TestStampChunks pins the chunks' geometry: a log's chunks hold what one
// slice doubled from 16 pairs would (the next power of two, at least 16)
// up to stampChunk pairs, then whole chunks of stampChunk; the first
// chunk is doubled up to stampHalf pairs only.
func TestStampChunks(t *testing.T) {
	var s stamps[uint64]
	for i := range 3*stampChunk + 1 {
		s.add(uint64(i), uint64(i), uint64(i))
		held := stampStart(len(s.full)) + cap(s.tail)
		want := max(16, 1<<bits.Len(uint(i))) // the next power of two above i
		if n := i + 1; n > stampChunk {
			want = (n + stampChunk - 1) &^ (stampChunk - 1)
		}
		if held != want {
			t.Fatalf("after %d pairs the chunks hold %d, want %d", i+1, held, want)
		}
		if got := s.payload(i); got != uint64(i) {
			t.Fatalf("payload %d: %d", i, got)
		}
		if i == stampChunk-1 {
			assert.Equal(t, []int{stampHalf}, []int{cap(s.full[0])}, "the first chunk is doubled up to half a chunk")
		}
	}
}
