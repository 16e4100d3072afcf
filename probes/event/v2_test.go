package event

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// v2Writer writes format 2, one record per event (or folded pair): the
// writer format 3 replaced, kept for the fixtures' check (it writes them
// byte for byte) and to compare the two formats' size and replay speed in
// one run.
type v2Writer struct {
	out     []byte
	st      eventState
	ops     map[op]uint32
	sizes   map[uint64]uint32
	prev    Event
	hasPrev bool
	frames  uint64
	sum     uint32
	chain   bool
}

// v2Trace writes h (its Identity after it when id is not nil) and recs in
// format 2, with a Flush after every flushEvery records (0: none).
func v2Trace(tb testing.TB, h *Header, id *Identity, recs []Record, flushEvery int) (data []byte, frames uint64, sum uint32) {
	tb.Helper()
	w := &v2Writer{ops: map[op]uint32{}, sizes: map[uint64]uint32{}, chain: id != nil}
	w.st.time = h.Start
	w.out = binary.LittleEndian.AppendUint16([]byte(Magic), 2)
	w.frame(recHeader, func(e *encoder) { e.header(h) })
	if id != nil {
		w.frame(recIdentity, func(e *encoder) { e.identity(id) })
	}
	for i, rec := range recs {
		if ev, ok := rec.(*Event); ok {
			w.event(ev)
		} else {
			typ, enc := recordCoder(rec)
			require.NotNil(tb, enc, "%T", rec)
			w.flushPrev()
			w.frame(typ, enc)
		}
		if flushEvery > 0 && i%flushEvery == flushEvery-1 {
			w.flushPrev()
		}
	}
	w.flushPrev()
	return w.out, w.frames, w.sum
}

func (w *v2Writer) frame(typ byte, enc func(*encoder)) {
	e := encoder{b: make([]byte, maxHead)}
	enc(&e)
	w.add(frame(e.b, typ))
}

func (w *v2Writer) add(rec []byte) {
	w.frames++
	if w.chain {
		w.sum = crc32.Update(w.sum, castagnoli, rec[len(rec)-frameTail:])
	}
	w.out = append(w.out, rec...)
}

func (w *v2Writer) event(ev *Event) {
	if w.hasPrev {
		w.hasPrev = false
		if outer, nested, first, ok := fold(&w.prev, ev); ok {
			w.emit(outer, nested, first)
			return
		}
		w.emit(&w.prev, nil, false)
	}
	w.prev, w.hasPrev = *ev, true
}

func (w *v2Writer) flushPrev() {
	if w.hasPrev {
		w.hasPrev = false
		w.emit(&w.prev, nil, false)
	}
}

func (w *v2Writer) emit(ev, nested *Event, nestedFirst bool) {
	st := &w.st
	p := make([]byte, maxHead, maxHead+maxEventPayload)
	mi := len(p)
	p = append(p, 0)
	var mask byte
	if ev.PID != st.pid {
		mask |= mPID
		p = binary.AppendUvarint(p, uint64(ev.PID))
	}
	if ev.TID != st.tid {
		mask |= mTID
		p = binary.AppendVarint(p, int64(ev.TID)-int64(ev.PID))
	}
	if ev.Device != st.dev {
		mask |= mDevice
		p = binary.AppendVarint(p, int64(ev.Device))
	}
	if ev.Stack != 0 {
		mask |= mStack
		p = binary.AppendUvarint(p, uint64(ev.Stack))
	}
	if ev.Ret != 0 {
		mask |= mRet
		p = binary.AppendVarint(p, int64(ev.Ret))
	}
	if ev.Stream != 0 || ev.Flags != 0 {
		mask |= mExtra
		var x byte
		if ev.Stream != 0 {
			x |= xStream
		}
		if ev.Flags != 0 {
			x |= xFlags
		}
		p = append(p, x)
		if ev.Stream != 0 {
			p = binary.AppendUvarint(p, ev.Stream)
		}
		if ev.Flags != 0 {
			p = append(p, byte(ev.Flags))
		}
	}
	p = w.op(p, ev)
	p = binary.AppendVarint(p, int64(ev.Time-st.time))
	p = binary.AppendUvarint(p, ev.Duration)
	if ev.Addr != 0 {
		mask |= mAddr
		p = binary.AppendVarint(p, int64(ev.Addr-st.addr))
		st.addr = ev.Addr
	}
	if i, ok := w.sizes[ev.Size]; ok {
		p = binary.AppendUvarint(p, uint64(i)+1)
	} else {
		if len(w.sizes) < maxSizes {
			w.sizes[ev.Size] = uint32(len(w.sizes))
		}
		p = binary.AppendUvarint(append(p, 0), ev.Size)
	}
	st.time, st.pid, st.tid, st.dev = ev.Time, ev.PID, ev.TID, ev.Device
	if nested != nil {
		mask |= mFold
		var n byte
		if nestedFirst {
			n |= nFirst
		}
		if nested.Stack != 0 {
			n |= nStack
		}
		if nested.Flags != FlagNested {
			n |= nFlags
		}
		p = append(p, n)
		p = w.op(p, nested)
		p = binary.AppendVarint(p, int64(nested.Time-ev.Time))
		p = binary.AppendUvarint(p, nested.Duration)
		if n&nStack != 0 {
			p = binary.AppendUvarint(p, uint64(nested.Stack))
		}
		if n&nFlags != 0 {
			p = append(p, byte(nested.Flags))
		}
	}
	p[mi] = mask
	w.add(frame(p, recEvent))
}

func (w *v2Writer) op(p []byte, ev *Event) []byte {
	o := op{ev.Kind, ev.Layer, ev.API}
	if i, ok := w.ops[o]; ok {
		return binary.AppendUvarint(p, uint64(i)+1)
	}
	if len(w.ops) < maxOps {
		w.ops[o] = uint32(len(w.ops))
	}
	p = append(p, 0, byte(o.kind), byte(o.layer))
	return binary.AppendUvarint(p, uint64(o.api))
}

// fixtureFlush is how often the format 2 fixtures' writer flushed: every
// 100 records.
const fixtureFlush = 100

// v2Identity is the Identity of the format 2 fixtures written as flight
// recorder segments (the others have none).
func v2Identity(name string) *Identity {
	if name != "steady" && name != "vmm" {
		return nil
	}
	return &Identity{Recording: "fixture-" + name, Segment: 3, PrevFrames: 1234, PrevSum: 0xdeadbeef}
}

// mustFixtureV2 returns the ungzipped bytes of testdata/v2/NAME.vpt.gz.
func mustFixtureV2(tb testing.TB, name string) []byte {
	tb.Helper()
	f, err := os.Open(filepath.Join("testdata", "v2", name+".vpt.gz"))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = f.Close() })
	zr, err := gzip.NewReader(f)
	require.NoError(tb, err)
	data, err := io.ReadAll(zr)
	require.NoError(tb, err)
	return data
}

// TestV2Fixtures reads the format 2 fixtures: the format 1 fixtures'
// records (themselves checked against testdata/v1/golden.txt) as format
// 2's writer wrote them (flushed every fixtureFlush records), two of them as flight recorder segments. Each
// reads back to the same records, and its record count and chained
// checksum are those that writer reported (testdata/v2/frames.txt).
func TestV2Fixtures(t *testing.T) {
	var frames strings.Builder
	for _, name := range v1Fixtures {
		r1, want, err := readAll(t, mustFixture(t, name))
		require.NoError(t, err, name)
		data := mustFixtureV2(t, name)
		r, got, err := readAll(t, data)
		require.NoError(t, err, name)
		assert.False(t, r.Truncated(), name)
		h := *r1.Header()
		h.Version = 2
		assert.Equal(t, &h, r.Header(), name)
		assert.Equal(t, want, got, name)
		assert.Equal(t, v2Identity(name), r.Identity(), name)
		fmt.Fprintf(&frames, "%s frames=%d sum=%#08x bytes=%d\n", name, r.Frames(), r.Sum(), len(data))

		// The test's format 2 writer is the one that wrote the fixtures.
		again, wf, ws := v2Trace(t, &h, v2Identity(name), want, fixtureFlush)
		assert.True(t, bytes.Equal(data, again), "%s: v2Trace differs from the fixture", name)
		assert.Equal(t, r.Frames(), wf, name)
		assert.Equal(t, r.Sum(), ws, name)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "v2", "frames.txt"))
	require.NoError(t, err)
	assert.Equal(t, string(want), frames.String())
}
