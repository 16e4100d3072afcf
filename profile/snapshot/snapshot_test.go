package snapshot

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// The fixtures' scenario is documented in testdata/make_fixtures.py; every
// expected figure below is arithmetic on it.
const (
	KiB = 1 << 10
	MiB = 1 << 20
)

// mustPython returns python3's path, or skips (fails under CI=true).
func mustPython(tb testing.TB) string {
	tb.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("python3 not found: %v", err)
		}
		tb.Skipf("python3 not found: %v", err)
	}
	return py
}

// TestFixturesUpToDate regenerates the fixtures and checks the committed
// ones are what the script writes.
func TestFixturesUpToDate(t *testing.T) {
	py := mustPython(t)
	dir := t.TempDir()
	out, err := exec.Command(py, filepath.Join("testdata", "make_fixtures.py"), dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, name := range []string{"current.pickle", "older.pickle", "evil.pickle"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		want, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(t, err)
		assert.Equal(t, want, got, "%s is stale: run python3 testdata/make_fixtures.py", name)
	}
}

func mustRead(tb testing.TB, path string) []event.Record {
	tb.Helper()
	f, err := os.Open(path)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = f.Close() })
	recs, err := Read(f)
	require.NoError(tb, err)
	return recs
}

func mustAnalyze(tb testing.TB, recs []event.Record) *analysis.Result {
	tb.Helper()
	a := analysis.New(analysis.Options{})
	for _, r := range recs {
		require.NoError(tb, a.Add(r))
	}
	return a.Finish()
}

// figures are the totals a round trip must keep.
type figures struct {
	Allocations, Frees, Failed, Unknown, AllocatedBytes, PeakBytes, LiveBytesAtEnd uint64
}

func figuresOf(t analysis.Totals) figures {
	return figures{t.Allocations, t.Frees, t.FailedAllocations, t.UnknownFrees, t.AllocatedBytes, t.PeakBytes, t.LiveBytesAtEnd}
}

func TestImport(t *testing.T) {
	tests := []struct {
		name           string
		file           string
		segments       figures
		blocks         figures
		events, stacks int
	}{
		{
			name: "current generation",
			file: "current.pickle",
			// A (before the trace) + B + C on device 1; C freed; peak while C lived.
			segments: figures{Allocations: 3, Frees: 1, AllocatedBytes: 24 * MiB, PeakBytes: 24 * MiB, LiveBytesAtEnd: 22 * MiB},
			// p0 and q before the trace, then b1..b5; b1, q, b5, b2 freed;
			// peak p0+q+b1+b2+b3 = 14 MiB; live p0+b3+b4.
			blocks: figures{Allocations: 7, Frees: 4, Failed: 1, AllocatedBytes: 20*MiB + 256*KiB,
				PeakBytes: 14 * MiB, LiveBytesAtEnd: 7*MiB + 512*KiB},
			// 3+1 segment events, 7 block allocations, 4 frees, 1 oom.
			events: 4 + 7 + 4 + 1,
			// forward:10,11,12,13,14 backward:20,21 optimizer_step:30
			// shard:40,41 load_weights:5 (segment A and block p0 share it).
			stacks: 11,
		},
		{
			name:     "older generation",
			file:     "older.pickle",
			segments: figures{Allocations: 2, AllocatedBytes: 22 * MiB, PeakBytes: 22 * MiB, LiveBytesAtEnd: 22 * MiB},
			blocks:   figures{Allocations: 3, AllocatedBytes: 7*MiB + 512*KiB, PeakBytes: 7*MiB + 512*KiB, LiveBytesAtEnd: 7*MiB + 512*KiB},
			events:   5,
			// load_weights:5 (p0), backward:20 (b3), optimizer_step:30 (b4).
			stacks: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs := mustRead(t, filepath.Join("testdata", tt.file))
			require.IsType(t, &event.Header{}, recs[0])
			assert.Equal(t, "import", recs[0].(*event.Header).Mode)
			require.IsType(t, &event.Process{}, recs[1])
			require.IsType(t, &event.End{}, recs[len(recs)-1])
			var events, stacks int
			for _, r := range recs {
				switch r := r.(type) {
				case *event.Event:
					events++
				case *event.Stack:
					stacks++
					require.NotEmpty(t, r.Frames)
					assert.Equal(t, "train.py", r.Frames[0].File)
					assert.Equal(t, "<module>", r.Frames[len(r.Frames)-1].Function, "leaf first, as PyTorch lists them")
				}
			}
			assert.Equal(t, tt.events, events)
			assert.Equal(t, tt.stacks, stacks)

			res := mustAnalyze(t, recs)
			assert.Equal(t, tt.segments, figuresOf(res.Totals), "segments")
			require.NotNil(t, res.Blocks)
			assert.Equal(t, tt.blocks, figuresOf(*res.Blocks), "blocks")
		})
	}
}

func TestImportOOMAndTimes(t *testing.T) {
	recs := mustRead(t, filepath.Join("testdata", "current.pickle"))
	h := recs[0].(*event.Header)
	assert.Equal(t, uint64(1000*1000), h.Start, "the first entry's time_us, in ns")
	var oom []*event.Event
	for _, r := range recs {
		if e, ok := r.(*event.Event); ok && !e.OK() {
			oom = append(oom, e)
		}
	}
	require.Len(t, oom, 1)
	assert.Equal(t, uint64(32*MiB), oom[0].Size)
	assert.Equal(t, uint64(1110*1000), oom[0].Time)
	assert.Equal(t, event.LayerBlock, oom[0].Layer)
	assert.Equal(t, event.APIPyTorchMalloc, oom[0].API)
	assert.Equal(t, uint64(1210*1000), recs[len(recs)-1].(*event.End).Time)
	assert.Equal(t, "snapshot", recs[len(recs)-1].(*event.End).Reason, "times known")
}

// TestImportUntimed: trace entries without time_us are numbered, an order
// only, and the End says so (ReasonUntimed, analysis.EndReasonUntimed):
// the outputs then print no times.
func TestImportUntimed(t *testing.T) {
	s := &Snapshot{DeviceTraces: [][]TraceEntry{{
		{Action: ActionSegmentAlloc, Addr: 0x7f0000000000, Size: 2 * MiB},
		{Action: ActionSegmentFree, Addr: 0x7f0000000000, Size: 2 * MiB},
	}}}
	recs := s.Records()
	end := recs[len(recs)-1].(*event.End)
	assert.Equal(t, ReasonUntimed, end.Reason)
	assert.Equal(t, "snapshot without times", end.Reason)
	// The same entries with time_us are clock times.
	for i := range s.DeviceTraces[0] {
		s.DeviceTraces[0][i].TimeUS, s.DeviceTraces[0][i].HasTime = int64(10*i), true
	}
	recs = s.Records()
	assert.Equal(t, "snapshot", recs[len(recs)-1].(*event.End).Reason)
}

func TestUnsafePickles(t *testing.T) {
	evil, err := os.ReadFile(filepath.Join("testdata", "evil.pickle"))
	require.NoError(t, err)
	tests := []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"python's os.system reduce", evil, ErrUnsafe, "STACK_GLOBAL"},
		{"protocol 0 GLOBAL and REDUCE", []byte("cos\nsystem\n(S'echo pwned'\ntR."), ErrUnsafe, "GLOBAL os.system"},
		{"BUILD", []byte("\x80\x02}b."), ErrUnsafe, "BUILD"},
		{"persistent id", []byte("Pfoo\n."), ErrUnsafe, "PERSID"},
		{"huge string length", []byte("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f."), ErrMalformed, "runs past the end"},
		{"huge frame", []byte("\x80\x04\x95\xff\xff\xff\xff\xff\xff\x00\x00}."), ErrMalformed, "frame"},
		{"no stop", []byte("\x80\x02}"), ErrMalformed, "STOP"},
		{"unknown opcode", []byte("\x80\x02\xff."), ErrMalformed, "unknown opcode"},
		{"not a snapshot", []byte("\x80\x02]."), ErrMalformed, "want a dict"},
		{"no segments", []byte("\x80\x02}."), ErrMalformed, "segments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(bytes.NewReader(tt.data))
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

// TestDamagedPickles: every prefix of a fixture, and a few inconsistent
// opcode runs, fail with ErrMalformed and never panic.
func TestDamagedPickles(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "current.pickle"))
	require.NoError(t, err)
	for n := range len(data) - 1 {
		_, err := Decode(bytes.NewReader(data[:n]))
		require.ErrorIs(t, err, ErrMalformed, "prefix of %d bytes", n)
	}
	for _, p := range []string{"\x80\x02}(Ku.", "\x80\x02a.", "\x80\x02(.", "\x80\x02h\x05."} {
		_, err := Decode(bytes.NewReader([]byte(unescape(p))))
		assert.ErrorIs(t, err, ErrMalformed, "%q", p)
	}
}

// TestFindClassRefuses checks the second line of defence on its own: the
// unpickler's class resolver, should scan ever let a GLOBAL through.
func TestFindClassRefuses(t *testing.T) {
	_, err := fromPickle(t, []byte("cos\nsystem\n(S'echo pwned'\ntR."))
	require.ErrorIs(t, err, ErrUnsafe)
}

func TestEncodeIntegers(t *testing.T) {
	py := mustPython(t)
	vals := []uint64{0, 1, 255, 256, 65535, 65536, 1<<31 - 1, 1 << 31, 1<<32 + 5, 0x7f0000200000, 1<<63 - 1, 1 << 63, 1<<64 - 1}
	var buf bytes.Buffer
	e := &encoder{w: newBufWriter(&buf)}
	e.bytes(opProto, 2)
	e.list(len(vals), func(i int) { e.uint(vals[i]) })
	e.bytes(opStop)
	require.NoError(t, e.w.Flush())
	out := pyLoad(t, py, buf.Bytes(), "print(json.dumps([str(v) for v in d]))")
	var got []string
	require.NoError(t, json.Unmarshal(out, &got))
	for i, v := range vals {
		assert.Equal(t, formatUint(v), got[i])
	}
}

// pyLoad runs Python's pickle.load on data, then code with the value as d.
func pyLoad(tb testing.TB, py string, data []byte, code string) []byte {
	tb.Helper()
	cmd := exec.Command(py, "-c", "import json, pickle, sys\nd = pickle.load(sys.stdin.buffer)\n"+code)
	cmd.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(tb, err, "%s", stderr.String())
	return out
}

// pySnapshot is the JSON that Python's view of an exported snapshot gives.
type pySnapshot struct {
	Segments []struct {
		Device        int32          `json:"device"`
		Address       uint64         `json:"address"`
		TotalSize     uint64         `json:"total_size"`
		AllocatedSize uint64         `json:"allocated_size"`
		ActiveSize    uint64         `json:"active_size"`
		RequestedSize uint64         `json:"requested_size"`
		Stream        uint64         `json:"stream"`
		SegmentType   string         `json:"segment_type"`
		SegmentPoolID []int          `json:"segment_pool_id"`
		IsExpandable  *bool          `json:"is_expandable"`
		Frames        []any          `json:"frames"`
		Blocks        []pyBlock      `json:"blocks"`
		Extra         map[string]any `json:"-"`
	} `json:"segments"`
	DeviceTraces [][]map[string]any `json:"device_traces"`
}

type pyBlock struct {
	Address       uint64 `json:"address"`
	Size          uint64 `json:"size"`
	RequestedSize uint64 `json:"requested_size"`
	State         string `json:"state"`
	Frames        []struct {
		Filename string `json:"filename"`
		Line     int64  `json:"line"`
		Name     string `json:"name"`
	} `json:"frames"`
}

func TestRoundTrip(t *testing.T) {
	for _, file := range []string{"current.pickle", "older.pickle"} {
		t.Run(file, func(t *testing.T) {
			recs := mustRead(t, filepath.Join("testdata", file))
			var out bytes.Buffer
			require.NoError(t, Write(&out, recs))

			// Deterministic: the same records give the same bytes.
			var again bytes.Buffer
			require.NoError(t, Write(&again, recs))
			assert.Equal(t, out.Bytes(), again.Bytes())

			// export -> import gives the same figures.
			back, err := Read(bytes.NewReader(out.Bytes()))
			require.NoError(t, err)
			r1, r2 := mustAnalyze(t, recs), mustAnalyze(t, back)
			assert.Equal(t, figuresOf(r1.Totals), figuresOf(r2.Totals), "segments")
			require.NotNil(t, r2.Blocks)
			assert.Equal(t, figuresOf(*r1.Blocks), figuresOf(*r2.Blocks), "blocks")

			// The source and the export describe the same end state.
			src, err := os.ReadFile(filepath.Join("testdata", file))
			require.NoError(t, err)
			orig, err := Decode(bytes.NewReader(src))
			require.NoError(t, err)
			exp, err := Decode(bytes.NewReader(out.Bytes()))
			require.NoError(t, err)
			require.Len(t, exp.Segments, len(orig.Segments))
			for i := range orig.Segments {
				o, x := orig.Segments[i], exp.Segments[i]
				assert.Equal(t, o.Address, x.Address)
				assert.Equal(t, o.TotalSize, x.TotalSize)
				assert.Equal(t, o.AllocatedSize+pending(o), x.AllocatedSize, "pending frees export as allocated")
				require.Len(t, x.Blocks, len(o.Blocks))
				for j := range o.Blocks {
					assert.Equal(t, o.Blocks[j].Address, x.Blocks[j].Address)
					assert.Equal(t, o.Blocks[j].Size, x.Blocks[j].Size)
					assert.Equal(t, o.Blocks[j].Live(), x.Blocks[j].Live())
				}
			}
			if orig.DeviceTraces != nil {
				require.Len(t, exp.DeviceTraces, len(orig.DeviceTraces))
				// The export's traces open with what the import placed
				// before them: segment A, then blocks p0 and q.
				initial := [][]string{{ActionSegmentAlloc, ActionAlloc, ActionAlloc}, nil}
				for d := range orig.DeviceTraces {
					want := append(initial[d], actions(orig.DeviceTraces[d], true)...)
					assert.Equal(t, want, actions(exp.DeviceTraces[d], false), "device %d", d)
				}
			}

			// Python's pickle reads it, with the documented keys.
			py := mustPython(t)
			js := pyLoad(t, py, out.Bytes(), "print(json.dumps(d))")
			var ps pySnapshot
			require.NoError(t, json.Unmarshal(js, &ps))
			var keys map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(js, &keys))
			assert.Contains(t, keys, "segments")
			assert.Contains(t, keys, "device_traces")
			require.Len(t, ps.Segments, len(orig.Segments))
			for _, s := range ps.Segments {
				assert.Equal(t, []int{0, 0}, s.SegmentPoolID)
				require.NotNil(t, s.IsExpandable)
				at, sum := s.Address, uint64(0)
				for _, b := range s.Blocks {
					assert.Equal(t, at, b.Address, "blocks tile the segment (MemoryViz recomputes addresses this way)")
					at += b.Size
					sum += b.Size
					if b.State != StateInactive {
						require.NotEmpty(t, b.Frames)
						assert.Equal(t, "train.py", b.Frames[0].Filename)
					}
				}
				assert.Equal(t, s.TotalSize, sum)
			}
			for _, tr := range ps.DeviceTraces {
				for _, e := range tr {
					for _, k := range []string{"action", "size", "stream", "time_us", "frames"} {
						assert.Contains(t, e, k)
					}
					if e["action"] == ActionOOM {
						assert.Contains(t, e, "device_free")
					} else {
						assert.Contains(t, e, "addr")
					}
				}
			}
		})
	}
}

// pending is the bytes of a segment's blocks awaiting their free.
func pending(s Segment) uint64 {
	var n uint64
	for _, b := range s.Blocks {
		if b.State == StateActivePendingFree {
			n += b.Size
		}
	}
	return n
}

// actions lists a trace's memory actions. The source's free_requested
// entries are dropped (an export writes one with each completed free only),
// and so is "snapshot"; in an export, free_requested is checked to precede
// its free_completed.
func actions(tr []TraceEntry, source bool) []string {
	var out []string
	for i, e := range tr {
		switch e.Action {
		case ActionFreeRequested:
			if !source && (i+1 >= len(tr) || tr[i+1].Action != ActionFreeCompleted || tr[i+1].Addr != e.Addr) {
				out = append(out, "unpaired free_requested")
			}
			continue
		case ActionSnapshot:
			continue
		}
		out = append(out, e.Action)
	}
	return out
}

func TestExportWithoutBlockLayer(t *testing.T) {
	recs := []event.Record{
		&event.Header{Mode: "run", Start: 0},
		&event.Stack{ID: 1, Frames: []event.Frame{{Addr: 0x1234, Function: "cudaMalloc"}, {Addr: 0x5678, Function: "main", File: "main.c", Line: 7}}},
		&event.Event{Time: 1000, Addr: 0x1000, Size: 4 * MiB, Stack: 1, Device: 0, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICudaMalloc},
		&event.Event{Time: 1500, Addr: 0x1000, Size: 4 * MiB, Stack: 1, Device: 0, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICuMemAlloc, Flags: event.FlagNested},
		&event.Event{Time: 2000, Addr: 0x9000, Size: 1 * MiB, Stack: 1, Device: 1, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICudaMalloc},
		&event.Event{Time: 3000, Addr: 0x9000, Device: 1, Kind: event.KindFree, Layer: event.LayerSegment, API: event.APICudaFree},
		&event.Event{Time: 4000, Size: 80 * MiB, Device: 0, Ret: 2, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICudaMalloc},
	}
	x := NewExporter()
	for _, r := range recs {
		require.NoError(t, x.Add(r))
	}
	s := x.Snapshot()
	require.Len(t, s.Segments, 1)
	seg := s.Segments[0]
	assert.Equal(t, "large", seg.SegmentType)
	require.Len(t, seg.Blocks, 1, "a raw cudaMalloc is one allocated block")
	assert.Equal(t, StateActiveAllocated, seg.Blocks[0].State)
	assert.Equal(t, []Frame{{"??", 0, "cudaMalloc"}, {"main.c", 7, "main"}}, seg.Frames)
	require.Len(t, s.DeviceTraces, 2)
	assert.Equal(t, []string{"segment_alloc", "alloc", "oom"}, actions(s.DeviceTraces[0], false))
	assert.Equal(t, []string{"segment_alloc", "alloc", "free_completed", "segment_free"}, actions(s.DeviceTraces[1], false))
	assert.Equal(t, int64(1), s.DeviceTraces[0][0].TimeUS)
}
