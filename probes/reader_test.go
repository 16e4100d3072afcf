//go:build linux

package probes

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// fakeRing hands out samples in order, then says the deadline passed.
type fakeRing struct {
	samples  [][]byte
	deadline time.Time
}

func (r *fakeRing) ReadInto(rec *ringbuf.Record) error {
	if len(r.samples) == 0 {
		return os.ErrDeadlineExceeded
	}
	rec.RawSample = append(rec.RawSample[:0], r.samples[0]...)
	r.samples = r.samples[1:]
	return nil
}

func (r *fakeRing) SetDeadline(t time.Time) { r.deadline = t }

func (r *fakeRing) AvailableBytes() int {
	n := 0
	for _, s := range r.samples {
		n += int(ringRecordBytes(len(s)))
	}
	return n
}

// fakeVar is a BPF global counter.
type fakeVar struct {
	v   uint64
	err error
}

func (v fakeVar) Get(out any) error {
	if v.err != nil {
		return v.err
	}
	*out.(*uint64) = v.v
	return nil
}

// sample lays out a record header with no stack, per the contract header.
func sample(kind uint8, pid uint32) []byte {
	b := make([]byte, recordHeaderSize)
	binary.LittleEndian.PutUint32(b[40:], pid)
	b[58] = kind
	return b
}

// TestReaderCounts: short and unknown records are counted apart, and the
// lost figure is their sum with the BPF side's lost and unpaired counts.
func TestReaderCounts(t *testing.T) {
	ring := &fakeRing{samples: [][]byte{
		sample(uint8(event.KindAlloc), 42),
		sample(uint8(event.KindFree), 43)[:recordHeaderSize-1], // short
		sample(recFork, 44),
	}}
	rd := &reader{ring: ring, lostVar: fakeVar{v: 3}, unpairedVar: fakeVar{v: 4}}
	at := time.Unix(1000, 0)
	rd.setDeadline(at)
	assert.Equal(t, at, ring.deadline)

	r, err := rd.read()
	require.NoError(t, err)
	require.NotNil(t, r)
	assert.Equal(t, event.KindAlloc, r.ev.Kind)
	assert.Equal(t, uint32(42), r.ev.PID)

	r, err = rd.read()
	require.NoError(t, err)
	assert.Nil(t, r, "short: counted, not passed on")

	r, err = rd.read()
	require.NoError(t, err)
	assert.Equal(t, recFork, r.kind)
	assert.Equal(t, event.KindInvalid, r.ev.Kind, "a BPF-only kind is no event kind")

	_, err = rd.read()
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)

	rd.countUnknown()
	rd.countUnknown()
	assert.Equal(t, uint64(1), rd.short.Load())
	assert.Equal(t, uint64(2), rd.unknown.Load())
	lost, err := rd.lost()
	require.NoError(t, err)
	// The BPF globals (lost 3, unpaired 4), the short record and the two
	// unknown ones, each under its cause.
	assert.Equal(t, event.LostCauses{RingFull: 3, Unpaired: 4, Malformed: 1 + 2}, lost)

	rd.unpairedVar = fakeVar{err: errors.New("bad fd")}
	_, err = rd.lost()
	require.ErrorContains(t, err, "read unpaired counter: bad fd")
}

// TestReaderPosition: the reader counts the ring buffer bytes of what it
// read (the ring's 8-byte header and the sample padded to 8 bytes, as the
// kernel lays them out), so that the producer's position, taken as a mark
// is read, is reached exactly once every record before it has been read,
// short ones included.
func TestReaderPosition(t *testing.T) {
	assert.Equal(t, uint64(8+72), ringRecordBytes(72))
	assert.Equal(t, uint64(8+72), ringRecordBytes(71))
	assert.Equal(t, uint64(8+80), ringRecordBytes(73))
	ring := &fakeRing{samples: [][]byte{
		sample(uint8(event.KindAlloc), 1),
		sample(uint8(event.KindFree), 2)[:recordHeaderSize-3], // short: 69 bytes, 72 in the ring
		append(sample(uint8(event.KindAlloc), 3), make([]byte, 8*3)...),
	}}
	rd := &reader{ring: ring}
	at := rd.position()
	assert.Equal(t, uint64(80+80+104), at, "nothing read: all of it ahead")
	for i := range 3 {
		assert.Less(t, rd.consumed, at, "record %d still ahead", i)
		_, err := rd.read()
		require.NoError(t, err)
	}
	assert.Equal(t, at, rd.consumed, "reached once all are read")
	assert.Equal(t, at, rd.position(), "the ring is empty")
}

// gappyRing is a replayRing that finds itself empty (the deadline passes)
// after every gap records, as a reader that keeps up does between bursts.
type gappyRing struct {
	*replayRing
	gap, since int
}

func (r *gappyRing) ReadInto(rec *ringbuf.Record) error {
	if r.since == r.gap {
		r.since = 0
		return os.ErrDeadlineExceeded
	}
	r.since++
	return r.replayRing.ReadInto(rec)
}

// TestReaderRunBatches runs a session's reader loop over a trainer's
// records, in batches cut by the ring running dry (gaps shorter and longer
// than a batch) and by the batch size: every record comes out once, in
// effect order, none late or lost, each stack written once, and the trace
// reads back whole.
func TestReaderRunBatches(t *testing.T) {
	const pid = 1 << 30
	samples, span := trainerRecords(pid, 16, 8, 1000)
	for _, gap := range []int{1, 100, batchRecords, 3 * batchRecords, 1 << 30} {
		t.Run(strconv.Itoa(gap), func(t *testing.T) {
			var trace bytes.Buffer
			w, err := event.NewWriter(&trace, &event.Header{Start: 1})
			require.NoError(t, err)
			sink := &lockedSink{w: w}
			n := len(samples) + len(samples)/2 // past the end: times shifted on
			// Calls that return in an hour: the clock readings taken as the
			// ring runs dry must not pass them.
			base := MonotonicNow() + 3600e9
			ring := &gappyRing{replayRing: &replayRing{samples: samples, span: span, base: base, n: n}, gap: gap}
			s := mustBenchSession(t, sink, ring, pid)
			s.order.window = 100_000 // 80 records: released as the reader goes
			var flushed int
			sink.observe = func(rec event.Record) {
				if _, ok := rec.(*event.Event); ok && s.order.n > 0 {
					flushed++
				}
			}
			require.NoError(t, runReader(s))
			require.NoError(t, w.Flush())
			assert.Greater(t, flushed, n/2, "events written while others are held")

			assert.Equal(t, uint64(n), s.stats.Events.Load())
			assert.Zero(t, s.order.late, "late")
			assert.Zero(t, s.order.n, "held")
			r, err := event.NewReader(&trace)
			require.NoError(t, err)
			var events, stacks int
			var last uint64
			for {
				rec, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				switch rec := rec.(type) {
				case *event.Event:
					events++
					require.GreaterOrEqual(t, rec.Time, last, "effect order, event %d", events)
					last = rec.Time
				case *event.Stack:
					stacks++
				}
			}
			assert.False(t, r.Truncated())
			assert.Equal(t, n, events)
			assert.Equal(t, 8, stacks, "one Stack record per call site")
		})
	}
}
