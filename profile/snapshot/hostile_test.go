package snapshot

import (
	"bufio"
	"bytes"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// importBound is the import's promise (doc.go): its peak heap stays within
// this many times the file's size.
const importBound = ImportBound

// densePickles are pickles of about size bytes built to take memory out
// of proportion to their size, no snapshot: each opcode a value, a
// container, a mark or a reference that costs tens of bytes once decoded.
func densePickles(size int) map[string][]byte {
	rep := func(head []byte, unit []byte, tail []byte) []byte {
		b := append([]byte(nil), head...)
		for len(b)+len(unit)+len(tail) <= size {
			b = append(b, unit...)
		}
		return append(b, tail...)
	}
	p2 := []byte{opProto, 2}
	out := map[string][]byte{
		// MARK after MARK: a mark stack as long as the file.
		"marks": rep(p2, []byte{opMark}, []byte{opNone, opStop}),
		// Empty lists, each a value on the stack.
		"lists": rep(p2, []byte{opEmptyList}, []byte{opStop}),
		// One list duplicated: a stack slot a byte.
		"dups": rep(append(p2, opEmptyList), []byte{'2'}, []byte{opStop}),
		// One list memoized over and over: a memo slot a byte.
		"memoize": rep([]byte{opProto, 4, opEmptyList}, []byte{0x94}, []byte{opStop}),
		// A list of empty lists: a container and a slot every two bytes.
		"nested": rep(append(p2, opEmptyList), []byte{opEmptyList, 'a'}, []byte{opStop}),
		// A dict of small ints: an entry every four bytes.
		"dict": rep(append(p2, opEmptyDict, opMark), []byte{opBinInt1, 1, opBinInt1, 2}, []byte{opSetItems, opStop}),
		// One list referred to 1000 times a batch, as CPython batches:
		// five bytes a slot, within the values' bound, refused only by the
		// conversion (no snapshot).
		"refs": func() []byte {
			b := []byte{opProto, 2, opEmptyList, 'r', 0, 0, 0, 0}
			for len(b)+5002 <= size {
				b = append(b, opMark)
				for range 1000 {
					b = append(b, 'j', 0, 0, 0, 0)
				}
				b = append(b, opAppends)
			}
			return append(b, opStop)
		}(),
		// Protocol 0 (gopickle's): marks, then a list.
		"marks0": rep(nil, []byte{opMark}, []byte{opNone, opStop}),
	}
	return out
}

// sharedSegment is a snapshot whose segments list refers to one segment of
// size/40 blocks refs times: five bytes of file for a segment's worth of
// blocks converted each time.
func sharedSegment(size, refs int) []byte {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	m := newMemoPickle(w)
	m.e.bytes(opProto, 2, opEmptyDict, opMark)
	m.str("segments")
	m.e.bytes(opEmptyList, opMark)
	nblocks := size / 40
	seg := m.dict(func() {
		m.str("address")
		m.e.int(1 << 32)
		m.str("total_size")
		m.e.int(int64(nblocks) * 512)
		m.str("blocks")
		m.list(nblocks, func(i int) {
			m.dict(func() {
				m.str("size")
				m.e.int(512)
				m.str("state")
				m.str("active_allocated")
			})
		})
	})
	for range refs - 1 {
		m.get(seg)
	}
	m.e.bytes(opAppends, opSetItems, opStop)
	_ = w.Flush()
	return buf.Bytes()
}

// importPeak imports data and returns its peak heap over its size, and
// the import's error.
func importPeak(data []byte) (float64, error) {
	var err error
	peak := peakHeap(func() {
		var recs any
		recs, err = Read(bytes.NewReader(data))
		runtime.KeepAlive(recs)
	})
	return peak / float64(len(data)), err
}

// TestImportMemoryHostile imports pickles (1 MiB) packed with values,
// containers, marks and references, and measures the peak heap: each is
// refused before it is decoded, within importBound times its size (a
// 12 MB pickle of MARKs took 2 GB). A snapshot that refers to one segment
// again and again is refused at the second reference: it takes no more
// than the same snapshot with one (the conversion once took thousands of
// times the file).
func TestImportMemoryHostile(t *testing.T) {
	for name, data := range densePickles(1 << 20) {
		t.Run(name, func(t *testing.T) {
			ratio, err := importPeak(data)
			t.Logf("%s: %d bytes, peak heap %.1f x the file, error: %v", name, len(data), ratio, err)
			assert.ErrorIs(t, err, ErrMalformed)
			assert.LessOrEqual(t, ratio, float64(importBound))
		})
	}
	t.Run("shared segment", func(t *testing.T) {
		once := sharedSegment(256<<10, 1)
		shared := sharedSegment(256<<10, 200)
		base, err := importPeak(once)
		require.NoError(t, err)
		ratio, err := importPeak(shared)
		t.Logf("shared segment: %d bytes, peak heap %.1f x the file (%.1f x with one reference), error: %v", len(shared), ratio, base, err)
		require.ErrorIs(t, err, ErrMalformed)
		assert.Contains(t, err.Error(), "segments[1]: the same dict")
		// Per byte of file: 199 references add 995 bytes to the file and
		// must add no more than their share of the heap.
		assert.LessOrEqual(t, ratio*float64(len(shared)), 1.5*base*float64(len(once)))
	})
}

// TestImportMemoHostile imports a 9-byte pickle that memoizes a list at
// index 2^24-1: the memo it asks for (2^24 entries) is refused before
// anything grows to it, so the import allocates a few KiB, not the 64 MiB
// of a 2^24-entry table of int32.
func TestImportMemoHostile(t *testing.T) {
	data := []byte{opProto, 2, opEmptyList, 'r', 0xff, 0xff, 0xff, 0, opStop}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Read(bytes.NewReader(data))
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes of pickle: %d bytes allocated, error: %v", len(data), allocated, err)
	require.ErrorIs(t, err, ErrMalformed)
	assert.Less(t, allocated, uint64(1<<20))
}
