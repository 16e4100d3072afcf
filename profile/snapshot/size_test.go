package snapshot

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nlpodyssey/gopickle/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memoPickle writes pickles as CPython's pickler does for a real snapshot:
// every dict, list and string is memoized (LONG_BINPUT) and an object met
// again is a LONG_BINGET of it. PyTorch shares its frame dicts between
// tracebacks, and a block's free between its alloc's: a real snapshot is
// mostly references, so its decoded size is many times the file's.
type memoPickle struct {
	e    encoder
	next uint32
	strs map[string]uint32
}

func newMemoPickle(w *bufio.Writer) *memoPickle {
	return &memoPickle{e: encoder{w: w}, strs: map[string]uint32{}}
}

func (m *memoPickle) put() uint32 {
	var b [5]byte
	b[0] = 'r'
	binary.LittleEndian.PutUint32(b[1:], m.next)
	m.e.bytes(b[:]...)
	m.next++
	return m.next - 1
}

func (m *memoPickle) get(i uint32) {
	var b [5]byte
	b[0] = 'j'
	binary.LittleEndian.PutUint32(b[1:], i)
	m.e.bytes(b[:]...)
}

// str writes s, or a reference to its first occurrence.
func (m *memoPickle) str(s string) {
	if i, ok := m.strs[s]; ok {
		m.get(i)
		return
	}
	m.e.str(s)
	m.strs[s] = m.put()
}

// dict writes a memoized dict whose entries kv writes.
func (m *memoPickle) dict(kv func()) uint32 {
	m.e.bytes(opEmptyDict)
	i := m.put()
	m.e.bytes(opMark)
	kv()
	m.e.bytes(opSetItems)
	return i
}

// list writes a memoized list of n items.
func (m *memoPickle) list(n int, item func(i int)) uint32 {
	m.e.bytes(opEmptyList)
	i := m.put()
	for j := 0; j < n; j += batch {
		m.e.bytes(opMark)
		for k := j; k < min(j+batch, n); k++ {
			item(k)
		}
		m.e.bytes(opAppends)
	}
	return i
}

// bigSnapshot returns a snapshot pickle of one device whose trace holds
// entries alloc and free_completed entries (half each, a working set of
// 4096 blocks live at a time) over tracebacks of depth frames drawn from
// 2000 distinct frames, plus the live blocks' segments.
func bigSnapshot(tb testing.TB, entries, depth int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	m := newMemoPickle(w)
	m.e.bytes(opProto, 2)
	const distinct = 2000
	frameRef := make([]uint32, distinct)
	haveFrame := make([]bool, distinct)
	frame := func(f int) {
		if haveFrame[f] {
			m.get(frameRef[f])
			return
		}
		haveFrame[f] = true
		frameRef[f] = m.dict(func() {
			m.str("name")
			m.str(fmt.Sprintf("layer_%d_forward", f))
			m.str("filename")
			m.str(fmt.Sprintf("/opt/conda/lib/python3.11/site-packages/model/module_%d.py", f%97))
			m.str("line")
			m.e.int(int64(f%800 + 1))
		})
	}
	const working = 4096
	liveLists := make([]uint32, working)
	m.e.bytes(opEmptyDict)
	m.put()
	m.e.bytes(opMark)
	m.str("segments")
	m.list(1, func(int) {
		m.dict(func() {
			for _, kv := range []struct {
				k string
				v int64
			}{{"device", 0}, {"address", 1 << 40}, {"total_size", working << 20}, {"allocated_size", 0},
				{"active_size", 0}, {"requested_size", 0}, {"stream", 0}} {
				m.str(kv.k)
				m.e.int(kv.v)
			}
			m.str("segment_type")
			m.str("large")
			m.str("is_expandable")
			m.e.bool(false)
			m.str("frames")
			m.list(0, nil)
			m.str("blocks")
			m.list(0, nil)
		})
	})
	m.str("device_traces")
	m.list(1, func(int) {
		m.list(entries, func(i int) {
			slot := i % working
			alloc := (i/working)%2 == 0
			m.dict(func() {
				m.str("action")
				if alloc {
					m.str(ActionAlloc)
				} else {
					m.str(ActionFreeCompleted)
				}
				m.str("addr")
				m.e.int(1<<40 + int64(slot)<<20)
				m.str("size")
				m.e.int(int64(512 << (i % 11)))
				m.str("stream")
				m.e.int(0)
				m.str("time_us")
				m.e.int(int64(i) * 10)
				m.str("frames")
				if !alloc {
					// The free's traceback is its alloc's.
					m.get(liveLists[slot])
					return
				}
				liveLists[slot] = m.list(depth, func(j int) { frame((i*7 + j*13) % distinct) })
			})
		})
	})
	m.e.bytes(opSetItems, opStop)
	if m.e.err == nil {
		m.e.err = w.Flush()
	}
	if m.e.err != nil {
		tb.Fatal(m.e.err)
	}
	return buf.Bytes()
}

// peakHeap runs f and returns the largest heap in use seen while it ran
// (sampled every millisecond) over the heap in use before it.
func peakHeap(f func()) float64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	peak := base
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		var s runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-t.C:
				runtime.ReadMemStats(&s)
				peak = max(peak, s.HeapAlloc)
			}
		}
	}()
	f()
	close(done)
	wg.Wait()
	runtime.ReadMemStats(&ms)
	peak = max(peak, ms.HeapAlloc)
	return float64(peak - base)
}

// BenchmarkImportMemory imports a 500k-entry (72 MB) snapshot pickle written as
// PyTorch's are (memoized frames shared between tracebacks) and reports
// the peak heap of the import over the file's size (the ceiling is 10).
func BenchmarkImportMemory(b *testing.B) {
	data := bigSnapshot(b, 500_000, 24)
	b.SetBytes(int64(len(data)))
	var peak float64
	for b.Loop() {
		peak = peakHeap(func() {
			recs, err := Read(bytes.NewReader(data))
			if err != nil {
				b.Fatal(err)
			}
			runtime.KeepAlive(recs)
		})
	}
	b.ReportMetric(float64(len(data))/(1<<20), "file-MiB")
	b.ReportMetric(peak/float64(len(data)), "peak-heap/file-B")
}

// TestFastLoadMatchesGopickle decodes the fixtures, a memoized synthetic
// snapshot and an exported one both ways: the values are the same.
func TestFastLoadMatchesGopickle(t *testing.T) {
	exported := func() []byte {
		var buf bytes.Buffer
		recs := mustRead(t, "testdata/current.pickle")
		require.NoError(t, Write(&buf, recs))
		return buf.Bytes()
	}
	for _, tt := range []struct {
		name string
		data func() []byte
	}{
		{"current", func() []byte { return mustReadFile(t, "testdata/current.pickle") }},
		{"older", func() []byte { return mustReadFile(t, "testdata/older.pickle") }},
		{"memoized", func() []byte { return bigSnapshot(t, 20_000, 8) }},
		{"exported", exported},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.data()
			want, err := fromPickle(t, data)
			require.NoError(t, err)
			got, err := fastLoad(data, nil, 0)
			require.NoError(t, err)
			assert.Equal(t, want, got)
			// Sized by scan: the same values, each list and dict
			// allocated at its final size.
			sim, err := scan(data)
			require.NoError(t, err)
			got, err = fastLoad(data, sim.sizes, int(sim.memo))
			require.NoError(t, err)
			assert.Equal(t, want, got)
			assertExact(t, got)
		})
	}
	// What it does not vouch for goes to gopickle.
	for _, bad := range [][]byte{{opProto, 2, opStop}, {opProto, 2, opAppends, opStop}, {opProto, 2, 'I', '1', '\n', opStop}} {
		_, err := fastLoad(bad, nil, 0)
		assert.ErrorIs(t, err, errSlowPath, "%q", bad)
	}
}

// assertExact checks that every list and dict in v has no spare capacity.
func assertExact(t *testing.T, v any) {
	t.Helper()
	seen := map[any]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch c := v.(type) {
		case *types.List:
			if seen[c] {
				return
			}
			seen[c] = true
			assert.Equal(t, len(*c), cap(*c), "a list's capacity")
			for _, e := range *c {
				walk(e)
			}
		case *types.Dict:
			if seen[c] {
				return
			}
			seen[c] = true
			assert.Equal(t, len(*c), cap(*c), "a dict's capacity")
			for _, e := range *c {
				walk(e.Value)
			}
		case *types.Tuple:
			for _, e := range *c {
				walk(e)
			}
		}
	}
	walk(v)
}

func mustReadFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	require.NoError(tb, err)
	return b
}
