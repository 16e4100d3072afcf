package event

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// everyKindEvents are events of every Kind on every Layer, each field away
// from its default somewhere (a second PID and thread, devices, streams,
// errors, flags, stacks, addresses that recur and that do not), and
// folded pairs of each kind, nested first and second.
func everyKindEvents() []Record {
	var out []Record
	t := uint64(1_000_000)
	for k := KindAlloc; int(k) < len(kindNames); k++ {
		for l := LayerUnknown; l <= LayerDevice; l++ {
			i := uint64(len(out))
			t += 1000 + i*7
			ev := &Event{Time: t, Duration: i * 13, Addr: 0x7f00_0000_0000 + (i%5)<<21, Size: 1 << (i % 30),
				Stream: i % 3, PID: 100 + uint32(i%2), TID: 100 + uint32(i%3), Stack: StackID(i % 4),
				Ret: int32(i%5) - 2, Device: int32(i%4) - 1, Kind: k, Layer: l, API: API(i % 40), Flags: Flags(i % 4)}
			if i%6 == 0 {
				ev.Addr = 0
			}
			out = append(out, ev)
			// A runtime call with the driver call nested in it: it folds.
			outer := *ev
			outer.Time, outer.Flags, outer.API = t+500, 0, APICudaMalloc
			nested := outer
			nested.Time, nested.Duration, nested.Stack, nested.Flags, nested.API = t+400, 7, StackID(i%2), FlagNested|Flags(i%2)<<1, APICuMemAlloc
			if i%2 == 0 {
				out = append(out, &nested, &outer)
			} else {
				out = append(out, &outer, &nested)
			}
		}
	}
	return out
}

// TestRoundTripEveryKind writes every kind of event, alone and folded,
// and reads back exactly what was written, in one block and with every
// event in a block of its own.
func TestRoundTripEveryKind(t *testing.T) {
	want := everyKindEvents()
	require.Len(t, want, 3*(len(kindNames)-1)*int(LayerDevice+1))
	r, got, err := readAll(t, mustTrace(t, nil, want...))
	require.NoError(t, err)
	assert.False(t, r.Truncated())
	assert.Equal(t, want, got)
	assert.Equal(t, uint64(2), r.Frames(), "the header, then one block of every event")

	var chunks [][]Record
	for _, rec := range want {
		chunks = append(chunks, []Record{rec})
	}
	data, _ := chunkedTrace(t, nil, chunks...)
	_, got, err = readAll(t, data)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// TestCutEveryByte cuts a trace of many records (event blocks of many
// events, the other records between them) at every byte: exactly the
// records written before the last whole record before the cut are read,
// the cut is reported unless it falls between records, and the bytes
// dropped are those from that record's end to the cut.
func TestCutEveryByte(t *testing.T) {
	evs := everyKindEvents()
	others := testRecords()
	var chunks [][]Record
	for i := 0; len(evs) > 0 || len(others) > 0; i++ {
		if i%2 == 1 && len(others) > 0 {
			chunks = append(chunks, others[:1])
			others = others[1:]
			continue
		}
		n := min(len(evs), 5+i%17)
		chunks = append(chunks, evs[:n])
		evs = evs[n:]
	}
	data, ends := chunkedTrace(t, nil, chunks...)
	headerEnd := len(mustTrace(t, nil))
	blocks := 0
	for _, c := range chunks {
		if len(c) > 1 {
			blocks++
		}
	}
	require.Greater(t, blocks, 5)

	for cut := headerEnd; cut <= len(data); cut++ {
		// The records of the chunks whose end is at or before the cut.
		var want []Record
		end := headerEnd
		for i, c := range chunks {
			if ends[i] > cut {
				break
			}
			want, end = append(want, c...), ends[i]
		}
		r, got, err := readAll(t, data[:cut])
		require.NoError(t, err, "cut at %d", cut)
		if want == nil {
			want = []Record{}
		}
		require.Equal(t, want, got, "cut at %d", cut)
		assert.Equal(t, cut != end, r.Truncated(), "cut at %d", cut)
		assert.Equal(t, int64(end), r.Offset(), "cut at %d", cut)
		assert.Equal(t, int64(cut-end), r.Dropped(), "cut at %d", cut)
	}
}

// TestWriterBound: unflushed, the Writer holds at most bufSize bytes, as a
// bufio.Writer of that size did, and what it has written is whole records:
// a crash loses no more than before the events were put in blocks. Blocks
// close at about blockSize, so a cut or a damaged byte loses no more.
func TestWriterBound(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader())
	require.NoError(t, err)
	headerEnd := buf.Len()
	const n = 50_000
	writes := 0
	for i := range n {
		require.NoError(t, w.Write(testEvent(uint64(i))))
		require.LessOrEqual(t, w.Buffered(), bufSize, "event %d", i)
		if buf.Len() > headerEnd && i%1000 == 0 {
			r, got, err := readAll(t, buf.Bytes())
			require.NoError(t, err)
			require.False(t, r.Truncated(), "event %d: the bytes written end inside a record", i)
			require.NotEmpty(t, got)
			require.Equal(t, testEvent(uint64(len(got)-1)), got[len(got)-1], "event %d: a prefix of the events", i)
			writes++
		}
	}
	require.Greater(t, writes, 1, "a full buffer is written without a Flush")
	require.NoError(t, w.Close())
	_, got, err := readAll(t, buf.Bytes())
	require.NoError(t, err)
	assert.Len(t, got, n)
	// A cut loses one block: each about blockSize.
	blocks := 0
	for _, f := range splitFrames(buf.Bytes()) {
		if f.typ == recEvent {
			blocks++
			require.Less(t, len(f.payload), blockSize+maxEventPayload, "block %d", blocks)
		}
	}
	assert.Greater(t, blocks, n*5/blockSize, "at least 5 bytes an event")
	for i, rec := range got {
		if !assert.Equal(t, testEvent(uint64(i)), rec, fmt.Sprintf("event %d", i)) {
			break
		}
	}
}
