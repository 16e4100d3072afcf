package event

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// identitySegment writes a segment with id: a stack, n events and an End,
// and returns its bytes and the writer's Frames and Sum after Close.
func identitySegment(tb testing.TB, id *Identity, n int) ([]byte, uint64, uint32) {
	tb.Helper()
	var buf bytes.Buffer
	h := &Header{Tool: "t", Mode: "run", Start: 100}
	var w *Writer
	var err error
	if id == nil {
		w, err = NewWriter(&buf, h)
	} else {
		w, err = NewSegmentWriter(&buf, h, id)
	}
	require.NoError(tb, err)
	require.NoError(tb, w.Write(&Stack{ID: 1, PID: 5, Frames: []Frame{{Addr: 1, Function: "f"}}}))
	for i := range n {
		require.NoError(tb, w.Write(&Event{Time: 200 + uint64(i), Addr: 0x1000 + uint64(i)<<12, Size: 4096, PID: 5, TID: 5,
			Stack: 1, Kind: KindAlloc, API: APICudaMalloc}))
	}
	require.NoError(tb, w.Write(&End{Time: 1000, Reason: "exited"}))
	require.NoError(tb, w.Close())
	return buf.Bytes(), w.Frames(), w.Sum()
}

// readSegment reads a trace to its end: the reader, the records' count and the
// error that ended it (nil for io.EOF).
func readSegment(tb testing.TB, data []byte) (*Reader, int, error) {
	tb.Helper()
	r, err := NewReader(bytes.NewReader(data))
	require.NoError(tb, err)
	n := 0
	for {
		_, err := r.Next()
		if errors.Is(err, io.EOF) {
			return r, n, nil
		}
		if err != nil {
			return r, n, err
		}
		n++
	}
}

// TestIdentity: a segment's Identity is read with its header and is no
// record of the stream; a trace without one reads as before, with none.
// Frames counts every record written, the header and identity included:
// header, identity, stack, one block of the 10 events, End = 5 (4
// without the identity). Sum is kept for a segment only.
func TestIdentity(t *testing.T) {
	id := &Identity{Recording: "0123456789abcdef0123456789abcdef", Segment: 3, PrevFrames: 77, PrevSum: 0xdeadbeef}
	data, frames, sum := identitySegment(t, id, 10)
	assert.Equal(t, uint64(5), frames)
	r, n, err := readSegment(t, data)
	require.NoError(t, err)
	assert.Equal(t, id, r.Identity())
	assert.Equal(t, 12, n, "stack, 10 events, End: the identity is not returned")
	assert.Equal(t, frames, r.Frames())
	assert.Equal(t, sum, r.Sum())

	plain, pframes, psum := identitySegment(t, nil, 10)
	assert.Equal(t, uint64(4), pframes)
	r, n, err = readSegment(t, plain)
	require.NoError(t, err)
	assert.Nil(t, r.Identity(), "a trace without identity")
	assert.Equal(t, 12, n)
	assert.Equal(t, pframes, r.Frames())
	assert.NotZero(t, sum, "a segment's records are chained")
	assert.Zero(t, psum, "a plain trace's are not")
	assert.Zero(t, r.Sum())

	_, err = NewSegmentWriter(io.Discard, &Header{}, nil)
	assert.Error(t, err, "a segment writer needs an identity")
}

// TestIdentityCutAnywhere: cut at any byte after the identity, a segment
// still reads (every whole record before the cut), and its Frames and Sum
// fall short of what the writer said it ended with (what the next
// segment's identity carries): a cut at a record boundary, which reads as
// a clean end, is told from the whole segment.
func TestIdentityCutAnywhere(t *testing.T) {
	id := &Identity{Recording: "ab", Segment: 1}
	data, frames, sum := identitySegment(t, id, 20)
	var err error
	// Where the identity ends: read a segment of no event and no End.
	var head bytes.Buffer
	_, err = NewSegmentWriter(&head, &Header{Tool: "t", Mode: "run", Start: 100}, id)
	require.NoError(t, err)
	for cut := head.Len(); cut < len(data); cut++ {
		r, _, err := readSegment(t, data[:cut])
		require.NoError(t, err, "cut at %d", cut)
		assert.Equal(t, id, r.Identity(), "cut at %d", cut)
		assert.Less(t, r.Frames(), frames, "cut at %d", cut)
		assert.False(t, r.Frames() == frames && r.Sum() == sum, "cut at %d reads as whole", cut)
	}
	// Cut inside the identity: the header reads, the cut is Next's.
	for cut := head.Len() - 1; cut > head.Len()-4; cut-- {
		r, n, err := readSegment(t, data[:cut])
		require.NoError(t, err, "cut at %d", cut)
		assert.Nil(t, r.Identity())
		assert.Zero(t, n)
		assert.True(t, r.Truncated(), "cut at %d", cut)
	}
}

// TestIdentityDamaged: a damaged identity, or an identity anywhere but
// right after the header, is corrupt; a segment of other records (another
// recording's, same events) has another Sum.
func TestIdentityDamaged(t *testing.T) {
	id := &Identity{Recording: "ab", Segment: 2, PrevFrames: 5, PrevSum: 9}
	data, _, sum := identitySegment(t, id, 3)
	var head bytes.Buffer
	_, err := NewWriter(&head, &Header{Tool: "t", Mode: "run", Start: 100})
	require.NoError(t, err)
	// The identity record lies between the header and the stack.
	bad := bytes.Clone(data)
	bad[head.Len()+3] ^= 0x40
	_, _, err = readSegment(t, bad)
	require.ErrorIs(t, err, ErrCorrupt)

	var withID bytes.Buffer
	_, err = NewSegmentWriter(&withID, &Header{Tool: "t", Mode: "run", Start: 100}, id)
	require.NoError(t, err)
	idFrame := withID.Bytes()[head.Len():]
	plain, _, _ := identitySegment(t, nil, 3)
	misplaced := append(bytes.Clone(plain), idFrame...)
	_, n, err := readSegment(t, misplaced)
	require.ErrorIs(t, err, ErrCorrupt)
	assert.ErrorContains(t, err, "identity that does not follow the header")
	assert.Equal(t, 5, n, "the records before it")

	other, _, osum := identitySegment(t, &Identity{Recording: "cd", Segment: 2, PrevFrames: 5, PrevSum: 9}, 3)
	assert.NotEqual(t, data, other)
	assert.NotEqual(t, sum, osum)
}

// TestIdentityAfterBufferSizedHeader: a segment whose header record is
// exactly the reader's buffer (bufSize) still has its Identity read.
func TestIdentityAfterBufferSizedHeader(t *testing.T) {
	// headerSize is the header record's bytes for a Host of n bytes: the
	// offset a plain trace's reader stands at after its header.
	headerSize := func(n int) int {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, &Header{Tool: "t", Mode: "run", Start: 100, Host: string(make([]byte, n))})
		require.NoError(t, err)
		require.NoError(t, w.Close())
		r, err := NewReader(bytes.NewReader(buf.Bytes()))
		require.NoError(t, err)
		return int(r.Offset()) - preambleSize
	}
	n := bufSize - headerSize(0)
	for range 4 { // the Host's length prefix grows with it
		n += bufSize - headerSize(n)
	}
	require.Equal(t, bufSize, headerSize(n))
	id := &Identity{Recording: "0123456789abcdef0123456789abcdef", Segment: 1}
	var buf bytes.Buffer
	w, err := NewSegmentWriter(&buf, &Header{Tool: "t", Mode: "run", Start: 100, Host: string(make([]byte, n))}, id)
	require.NoError(t, err)
	require.NoError(t, w.Write(&End{Time: 1000, Reason: "exited"}))
	require.NoError(t, w.Close())
	r, recs, err := readSegment(t, buf.Bytes())
	require.NoError(t, err)
	require.NotNil(t, r.Identity(), "the Identity after a %d-byte header", bufSize)
	assert.Equal(t, id.Recording, r.Identity().Recording)
	assert.Equal(t, 1, recs, "the End")
}
