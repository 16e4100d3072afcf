package event

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testHeader() *Header {
	return &Header{
		Tool:     "vramprof test",
		Mode:     "run",
		Command:  []string{"python", "train.py", "--lr=3e-4"},
		PID:      4242,
		Start:    123456789,
		WallTime: -1, // any int64 survives
		Host:     "gpu-node-7",
	}
}

func testEvent(i uint64) *Event {
	return &Event{
		Time: 1000 + i, Duration: 17, Addr: 0x7f00_0000_0000 + i<<20, Size: 1 << 20,
		Stream: 3, PID: 4242, TID: 4243, Stack: StackID(i % 7), Ret: 0, Device: 1,
		Kind: KindAlloc, Layer: LayerSegment, API: APICudaMalloc,
	}
}

// testRecords is a small trace body holding every record type once or more.
func testRecords() []Record {
	return []Record{
		&Process{PID: 4242, PPID: 1, Command: []string{"python", "train.py"}, Exe: "/usr/bin/python3.11", Time: 5,
			Cgroup: "/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope", Start: 123456},
		&Mapping{ID: 1, PID: 4242, Start: 0x7f00_0000_1000, Limit: 0x7f00_0010_0000, Offset: 0x1000,
			File: "/usr/lib/libcudart.so.12", BuildID: "0123abcd"},
		&Library{PID: 4242, Path: "/usr/lib/libcudart.so.12", BuildID: "0123abcd", Symbols: []string{"cudaMalloc", "cudaFree"}},
		&Library{PID: 4242, Path: "/usr/lib/libtinypool.so", Symbols: []string{"tiny_alloc"},
			Skipped: []string{"tiny_alloc_tail (tiny): jumps out of the function at 0x22a9: to 0x2160"}},
		&Library{PID: 4242, Path: "/opt/app/release", StrippedRuntime: true},
		&Stack{ID: 1, PID: 4242, Frames: []Frame{
			{Addr: 0x7f00_0000_1234, Mapping: 1, Function: "cudaMalloc"},
			{Addr: 0x55_0000_0042, Mapping: 2, Function: "ns::Class::method", File: "/src/a.cc", Line: 42},
		}},
		&NVMLStatus{Time: 6, Available: true},
		&Interpreter{PID: 7, Name: "CPython", Version: "3.11.2", Path: "/usr/bin/python3.11"},
		&Interpreter{PID: 8, Name: "CPython", Version: "3.9.2", Path: "/usr/lib/libpython3.9.so.1.0", Note: "Python 3.9 in pid 8: unsupported (3.10-3.14); native stacks only"},
		&DeviceInfo{Index: 0, Name: "NVIDIA A100-SXM4-40GB", UUID: "GPU-5a8a7f0e-1c2d-4e3f-8a9b-0c1d2e3f4a5b", TotalBytes: 40 << 30, Time: 7},
		testEvent(1),
		&Sample{Time: 1500, Device: 0, TotalBytes: 40 << 30, UsedBytes: 3 << 30, FreeBytes: 37 << 30,
			Processes: []ProcessUsage{{PID: 4242, UsedBytes: 2 << 30}, {PID: 4250, UsedBytes: 512 << 20}}},
		&Event{Time: 2000, Addr: 0x7f00_0010_0000, PID: 4242, TID: 4242, Stack: 1, Ret: 2, Device: DeviceUnknown,
			Kind: KindAlloc, Layer: LayerSegment, API: APICudaMalloc, Size: 1 << 40},
		&Lost{Time: 2500, Total: 3},
		&NVMLStatus{Time: 2600, Reason: "NVML unavailable: nvmlDeviceGetMemoryInfo_v2: GPU is lost"},
		&Event{Time: 3000, Addr: 0x7f00_0000_0000, PID: 4242, TID: 4244, Kind: KindFree, Layer: LayerSegment, API: APICudaFree, Device: 0},
		&TestPhase{Time: 3500, PID: 4242, TID: 4244, NodeID: "tests/test_x.py::test_p[2-cpu]", Phase: "call"},
		&TestPhase{Time: 3600, PID: 4242, TID: 4242},
		&End{Time: 4000, Reason: "exited", ExitCode: 3},
	}
}

// mustTrace writes h (testHeader when nil) and recs to a trace in memory.
func mustTrace(tb testing.TB, h *Header, recs ...Record) []byte {
	tb.Helper()
	if h == nil {
		h = testHeader()
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h)
	require.NoError(tb, err)
	for _, r := range recs {
		require.NoError(tb, w.Write(r))
	}
	require.NoError(tb, w.Close())
	return buf.Bytes()
}

// cloneRecord copies a record returned by Next (events are reused).
func cloneRecord(r Record) Record {
	if ev, ok := r.(*Event); ok {
		c := *ev
		return &c
	}
	return r
}

// readAll replays data to its end, returning the records before the end or
// the first error.
func readAll(tb testing.TB, data []byte) (*Reader, []Record, error) {
	tb.Helper()
	recs := []Record{} // not nil: compared with slices of a want list
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, recs, err
	}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return r, recs, nil
		}
		if err != nil {
			return r, recs, err
		}
		recs = append(recs, cloneRecord(rec))
	}
}

func TestRoundTrip(t *testing.T) {
	bigFrames := make([]Frame, 3000) // over the 64 KiB buffer: the copy path
	for i := range bigFrames {
		bigFrames[i] = Frame{Addr: uint64(i), Mapping: MappingID(i), Function: strings.Repeat("f", i%50), File: "x.c", Line: int64(i)}
	}
	tests := []struct {
		name string
		rec  Record
	}{
		{"event", testEvent(9)},
		{"event extremes", &Event{Time: ^uint64(0), Duration: ^uint64(0), Addr: ^uint64(0), Size: ^uint64(0), Stream: ^uint64(0),
			PID: ^uint32(0), TID: ^uint32(0), Stack: ^StackID(0), Ret: -2147483648, Device: -1, Kind: 255, Layer: 255, API: 65535, Flags: 255}},
		{"event zero", &Event{}},
		{"stack", testRecords()[3]},
		{"stack empty", &Stack{ID: 9, PID: 1}},
		{"stack big", &Stack{ID: 10, PID: 2, Frames: bigFrames}},
		{"mapping", testRecords()[1]},
		{"mapping non-utf8 path", &Mapping{ID: 3, File: "/tmp/\xff\xfe lib (deleted)"}},
		{"process", testRecords()[0]},
		{"process empty", &Process{PID: 7}},
		{"library", testRecords()[2]},
		{"lost", &Lost{Time: 1, Total: 1 << 50, Late: 1 << 40}},
		{"lost causes", &Lost{Time: 1, Total: 1<<40 + 8, Causes: LostCauses{RingFull: 1 << 40, Unpaired: 7, Malformed: 1}}},
		{"end", &End{Time: 9, Reason: "signal", ExitCode: -9}},
		{"end empty", &End{}},
		{"end stops", &End{Time: 9, Reason: "exited", StopsCounted: true,
			Stops: []ProcessStops{{PID: 7, Start: 1234, Count: 2}, {PID: ^uint32(0), Start: ^uint64(0), Count: 1}}}},
		{"end no stops", &End{Time: 9, Reason: "exited", StopsCounted: true}},
		{"device info", testRecords()[5]},
		{"device info extremes", &DeviceInfo{Index: -2147483648, Name: "\xff", UUID: strings.Repeat("u", 300),
			TotalBytes: ^uint64(0), Time: ^uint64(0)}},
		{"device info with a processes note", &DeviceInfo{Index: 1, Name: "GPU", TotalBytes: 1 << 30, Time: 9,
			ProcessesNote: "per-process figures not available: nvmlDeviceGetComputeRunningProcesses: Not Supported"}},
		{"device info empty", &DeviceInfo{}},
		{"sample", testRecords()[7]},
		{"sample no processes", &Sample{Time: 1, Device: 3, TotalBytes: 80 << 30, UsedBytes: 1 << 30, FreeBytes: 79 << 30}},
		{"sample extremes", &Sample{Time: ^uint64(0), Device: 2147483647, TotalBytes: ^uint64(0), UsedBytes: ^uint64(0),
			FreeBytes: ^uint64(0), Processes: []ProcessUsage{{PID: ^uint32(0), UsedBytes: ^uint64(0)}, {}}}},
		{"nvml available", &NVMLStatus{Time: 5, Available: true}},
		{"nvml unavailable", &NVMLStatus{Time: 5, Reason: "NVML unavailable: nvmlInit: Driver Not Loaded"}},
		{"interpreter", &Interpreter{PID: 5, Name: "CPython", Version: "3.13.5", Path: "/p", Note: "n"}},
		{"test phase", &TestPhase{Time: ^uint64(0), PID: ^uint32(0), TID: 1, NodeID: "t.py::TestA::test_b[x (y)]", Phase: "teardown"}},
		{"test phase unset", &TestPhase{Time: 9, PID: 2, TID: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := mustTrace(t, nil, tt.rec)
			r, recs, err := readAll(t, data)
			require.NoError(t, err)
			assert.False(t, r.Truncated())
			want := *testHeader()
			want.Version = Version
			assert.Equal(t, &want, r.Header())
			require.Len(t, recs, 1)
			assert.Equal(t, tt.rec, recs[0])
			assert.Equal(t, int64(len(data)), r.Offset())
			assert.Equal(t, int64(1), r.Records())
		})
	}
}

func TestRoundTripStream(t *testing.T) {
	want := testRecords()
	_, got, err := readAll(t, mustTrace(t, &Header{}, want...))
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// TestTruncated cuts a small trace at every byte: no panic, every record
// before the cut comes back, and the cut is reported unless it falls on a
// record boundary.
func TestTruncated(t *testing.T) {
	want := testRecords()
	data := mustTrace(t, nil, want...)
	// Record boundaries, from re-encoding the records one at a time.
	headerEnd := len(mustTrace(t, nil))
	bounds := []int{headerEnd}
	for i := range want {
		bounds = append(bounds, len(mustTrace(t, nil, want[:i+1]...)))
	}
	require.Equal(t, len(data), bounds[len(bounds)-1])

	for cut := 0; cut <= len(data); cut++ {
		r, got, err := readAll(t, data[:cut])
		if cut < headerEnd {
			require.ErrorIs(t, err, ErrTruncated, "cut at %d", cut)
			continue
		}
		require.NoError(t, err, "cut at %d", cut)
		complete := 0
		for complete+1 < len(bounds) && bounds[complete+1] <= cut {
			complete++
		}
		assert.Equal(t, want[:complete], got, "cut at %d", cut)
		assert.Equal(t, cut != bounds[complete], r.Truncated(), "cut at %d", cut)
		assert.Equal(t, int64(bounds[complete]), r.Offset(), "cut at %d", cut)
	}
}

// lengthFields returns the byte offsets of every record's length field.
func lengthFields(data []byte) map[int]bool {
	out := map[int]bool{}
	for _, f := range splitFrames(data) {
		for i := f.off + 1; i < f.off+f.head; i++ {
			out[i] = true
		}
	}
	return out
}

// rawFrame is one record of an undamaged version 2 trace.
type rawFrame struct {
	off, head int // offset in the file; type and length bytes
	typ       byte
	payload   []byte
}

// splitFrames splits an undamaged version 2 trace into its records.
func splitFrames(data []byte) []rawFrame {
	var out []rawFrame
	for off := preambleSize; off+minFrame <= len(data); {
		n, k := binary.Uvarint(data[off+1:])
		f := rawFrame{off: off, head: 1 + k, typ: data[off]}
		end := min(off+f.head+int(n), len(data))
		f.payload = data[off+f.head : end]
		out = append(out, f)
		off = end + frameTail
	}
	return out
}

// TestFlippedByte damages each byte of a trace in turn: the damage is always
// reported, never decoded into records that were not written.
func TestFlippedByte(t *testing.T) {
	want := testRecords()
	data := mustTrace(t, nil, want...)
	lengths := lengthFields(data)
	for _, mask := range []byte{0x01, 0x80, 0xff} {
		for i := range data {
			bad := bytes.Clone(data)
			bad[i] ^= mask
			r, got, err := readAll(t, bad)
			assert.Equal(t, want[:len(got)], got, "byte %d ^ %#x: records must be a prefix of those written", i, mask)
			switch {
			case errors.Is(err, ErrCorrupt), errors.Is(err, ErrNotTrace), errors.Is(err, ErrVersion):
			case errors.Is(err, ErrTruncated) || err == nil && r.Truncated():
				// A length grown past the end of the file reads as a cut.
				assert.True(t, lengths[i], "byte %d ^ %#x: reported as a cut but is not a length", i, mask)
			default:
				t.Errorf("byte %d ^ %#x: damage not detected (err %v)", i, mask, err)
			}
		}
	}
}

// chunkedTrace writes h (testHeader when nil) and the chunks of records,
// flushing after each, so that each chunk's events are one event block. It
// returns the trace and the file's length after each chunk.
func chunkedTrace(tb testing.TB, h *Header, chunks ...[]Record) ([]byte, []int) {
	tb.Helper()
	if h == nil {
		h = testHeader()
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h)
	require.NoError(tb, err)
	var ends []int
	for _, c := range chunks {
		for _, r := range c {
			require.NoError(tb, w.Write(r))
		}
		require.NoError(tb, w.Flush())
		ends = append(ends, buf.Len())
	}
	require.NoError(tb, w.Close())
	return buf.Bytes(), ends
}

func TestCorruptOffset(t *testing.T) {
	data, ends := chunkedTrace(t, nil, []Record{testEvent(1)}, []Record{testEvent(2)}, []Record{testEvent(3)})
	second := ends[0]
	data[second+blockHead+3] ^= 1 // inside the second event block's payload
	r, err := NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	_, err = r.Next()
	require.NoError(t, err)
	_, err = r.Next()
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, int64(second), ce.Offset)
	assert.Contains(t, err.Error(), "bad checksum")
	_, again := r.Next()
	assert.Equal(t, err, again, "errors are sticky")
}

func TestHeaderErrors(t *testing.T) {
	good := mustTrace(t, nil)
	withVersion := func(v uint16) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint16(b[len(Magic):], v)
		return b
	}
	tests := []struct {
		name    string
		data    []byte
		want    error
		message string
	}{
		{"empty", nil, ErrTruncated, "empty"},
		{"magic prefix", []byte("VRAM"), ErrTruncated, "preamble"},
		{"not a trace", []byte("{\"schema\": \"vramprof/report/v1\"}"), ErrNotTrace, "bad magic"},
		{"short foreign", []byte("PK"), ErrNotTrace, "bad magic"},
		{"newer version", withVersion(Version + 1), ErrVersion, "upgrade vramprof"},
		{"version zero", withVersion(0), ErrCorrupt, "version 0"},
		{"header cut", good[:len(good)-1], ErrTruncated, "header"},
		{"event first", append(bytes.Clone(good[:preambleSize]), mustTrace(t, nil, testEvent(1))[len(good):]...), ErrCorrupt, "not a header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(tt.data))
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.message)
			if errors.Is(tt.want, ErrNotTrace) {
				// A file that is not a trace is never quoted (it may be a
				// secret root can read).
				head := string(tt.data[:2])
				assert.NotContains(t, err.Error(), head)
				assert.NotContains(t, err.Error(), strconv.Quote(head)[1:len(strconv.Quote(head))-1])
			}
		})
	}
}

// appendFrame appends a hand-made version 2 record with a valid checksum.
func appendFrame(b []byte, typ byte, payload []byte) []byte {
	start := len(b)
	b = append(b, typ)
	b = binary.AppendUvarint(b, uint64(len(payload)))
	b = append(b, payload...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// appendFrameV1 appends a hand-made version 1 record with a valid checksum.
func appendFrameV1(b []byte, typ byte, payload []byte) []byte {
	start := len(b)
	b = append(b, typ)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// eventV1 is an Event's version 1 payload, as version 1 wrote it.
func eventV1(ev *Event) []byte {
	p := make([]byte, eventSize)
	le := binary.LittleEndian
	le.PutUint64(p[0:], ev.Time)
	le.PutUint64(p[8:], ev.Duration)
	le.PutUint64(p[16:], ev.Addr)
	le.PutUint64(p[24:], ev.Size)
	le.PutUint64(p[32:], ev.Stream)
	le.PutUint32(p[40:], ev.PID)
	le.PutUint32(p[44:], ev.TID)
	le.PutUint32(p[48:], uint32(ev.Stack))
	le.PutUint32(p[52:], uint32(ev.Ret))
	le.PutUint32(p[56:], uint32(ev.Device))
	p[60] = byte(ev.Kind)
	p[61] = byte(ev.Layer)
	le.PutUint16(p[62:], uint16(ev.API))
	p[64] = byte(ev.Flags)
	return p
}

// traceV1 is a version 1 trace of testHeader and nothing else, for tests
// to append version 1 records to.
func traceV1() []byte {
	b := append([]byte(Magic), 1, 0)
	var e encoder
	e.header(testHeader())
	return appendFrameV1(b, recHeader, e.b)
}

// TestForwardCompatible reads what a newer minor version may write: unknown
// record types and fields appended to payloads.
func TestForwardCompatible(t *testing.T) {
	two, _ := chunkedTrace(t, nil, []Record{testEvent(1)}, []Record{testEvent(2)})
	frames := splitFrames(two)
	require.Len(t, frames, 3)
	data := bytes.Clone(two[:frames[2].off])
	data = appendFrame(data, 200, []byte("a record type from the future"))
	data = appendFrame(data, recEvent, frames[2].payload)
	lost := splitFrames(mustTrace(t, nil, &Lost{Time: 5, Total: 6}))[1]
	data = appendFrame(data, recLost, append(bytes.Clone(lost.payload), 0x99))

	r, got, err := readAll(t, data)
	require.NoError(t, err)
	assert.False(t, r.Truncated())
	assert.Equal(t, []Record{testEvent(1), testEvent(2), &Lost{Time: 5, Total: 6}}, got)

	// An event field this reader does not know (a shape bit past
	// sNestedStack) cannot be skipped: it is refused, not guessed at.
	data = appendFrame(bytes.Clone(two[:frames[2].off]), recEvent, []byte{0, 0x80, 0x08, 0, 0, 1, 1, 12, 0, 0, 0})
	_, got, err = readAll(t, data)
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), "unknown event fields")
	assert.Equal(t, []Record{testEvent(1)}, got)

	// Format 2 the same way: its events took appended fields.
	two, _, _ = v2Trace(t, testHeader(), nil, []Record{testEvent(1), testEvent(2)}, 1)
	frames = splitFrames(two)
	require.Len(t, frames, 3)
	data = bytes.Clone(two[:frames[2].off])
	data = appendFrame(data, 200, []byte("a record type from the future"))
	data = appendFrame(data, recEvent, append(bytes.Clone(frames[2].payload), 1, 2, 3, 4, 5, 6, 7, 8))
	r, got, err = readAll(t, data)
	require.NoError(t, err)
	assert.False(t, r.Truncated())
	assert.Equal(t, []Record{testEvent(1), testEvent(2)}, got)

	// Version 1 the same way.
	data = appendFrameV1(traceV1(), recEvent, eventV1(testEvent(1)))
	data = appendFrameV1(data, 200, []byte("a record type from the future"))
	data = appendFrameV1(data, recEvent, append(eventV1(testEvent(2)), 1, 2, 3, 4, 5, 6, 7, 8))
	r, got, err = readAll(t, data)
	require.NoError(t, err)
	assert.False(t, r.Truncated())
	assert.Equal(t, []Record{testEvent(1), testEvent(2)}, got)
}

// TestLostWithoutLate reads a Lost written before Late was appended (Time
// and Total only): Late reads as 0.
func TestLostWithoutLate(t *testing.T) {
	data := appendFrameV1(traceV1(), recLost, []byte{5, 6}) // uvarints: Time 5, Total 6
	_, got, err := readAll(t, data)
	require.NoError(t, err)
	assert.Equal(t, []Record{&Lost{Time: 5, Total: 6}}, got)
}

// TestEndWithoutStops reads an End written before stops were counted
// (Time, Reason, ExitCode): StopsCounted reads false.
func TestEndWithoutStops(t *testing.T) {
	data := appendFrameV1(traceV1(), recEnd, []byte{5, 1, 'x', 6}) // Time 5, Reason "x", ExitCode 3 (zigzag)
	_, got, err := readAll(t, data)
	require.NoError(t, err)
	assert.Equal(t, []Record{&End{Time: 5, Reason: "x", ExitCode: 3}}, got)
}

// TestLostWithoutCauses reads a Lost written before Causes was appended
// (Time, Total, Late): the causes read as zero, not known.
func TestLostWithoutCauses(t *testing.T) {
	data := appendFrameV1(traceV1(), recLost, []byte{5, 6, 1}) // uvarints: Time 5, Total 6, Late 1
	_, got, err := readAll(t, data)
	require.NoError(t, err)
	require.Equal(t, []Record{&Lost{Time: 5, Total: 6, Late: 1}}, got)
	assert.False(t, got[0].(*Lost).Causes.Known(6))
}

// TestLostCausesKnown: the causes are known when the trace recorded them
// and they add up to the total.
func TestLostCausesKnown(t *testing.T) {
	c := LostCauses{RingFull: 3, Unpaired: 2, Malformed: 1}
	assert.True(t, c.Known(6))
	assert.False(t, c.Known(7), "not the total: another count")
	assert.False(t, LostCauses{}.Known(0), "nothing lost: nothing to explain")
}

// TestEventWithoutFlags reads an Event written before Flags was appended
// (the first 64 bytes of the layout): Flags reads as 0, the rest as written.
func TestEventWithoutFlags(t *testing.T) {
	ev := testEvent(3)
	ev.Flags = FlagNested
	data := appendFrameV1(traceV1(), recEvent, eventV1(ev)[:minEventSize])
	_, got, err := readAll(t, data)
	require.NoError(t, err)
	want := *ev
	want.Flags = 0
	assert.Equal(t, []Record{&want}, got)
}

// TestLibraryWithoutSkipped reads a Library written before Skipped was
// appended: Skipped reads as nil, the rest as written.
func TestLibraryWithoutSkipped(t *testing.T) {
	lib := &Library{PID: 7, Path: "/lib/libx.so", BuildID: "ab", Symbols: []string{"f", "g"}}
	var e encoder
	e.uint(uint64(lib.PID))
	e.str(lib.Path)
	e.str(lib.BuildID)
	e.strList(lib.Symbols)
	_, got, err := readAll(t, appendFrameV1(traceV1(), recLibrary, e.b))
	require.NoError(t, err)
	assert.Equal(t, []Record{lib}, got)
}

// TestLibraryWithoutStrippedRuntime reads a Library written before
// StrippedRuntime was appended: false, the rest as written.
func TestLibraryWithoutStrippedRuntime(t *testing.T) {
	lib := &Library{PID: 7, Path: "/lib/libx.so", Symbols: []string{"f"}, Skipped: []string{"g: why"}}
	var e encoder
	e.uint(uint64(lib.PID))
	e.str(lib.Path)
	e.str(lib.BuildID)
	e.strList(lib.Symbols)
	e.strList(lib.Skipped)
	_, got, err := readAll(t, appendFrameV1(traceV1(), recLibrary, e.b))
	require.NoError(t, err)
	assert.Equal(t, []Record{lib}, got)
}

func TestBadPayloads(t *testing.T) {
	base := mustTrace(t, nil)
	tests := []struct {
		name    string
		typ     byte
		payload []byte
		message string
	}{
		// Event blocks: a literal shape is 0, mask, flags, op (0, kind,
		// layer, api for a literal op), then the fields.
		{"empty event block", recEvent, nil, "empty event block"},
		{"event cut", recEvent, []byte{0}, "ends early"},
		{"event cut in its fields", recEvent, []byte{0, 0, 0, 0, 1, 1, 12, 0}, "ends early"},
		{"event shape not in table", recEvent, []byte{5}, "shape code 5"},
		{"event op not in table", recEvent, []byte{0, 0, 0, 5}, "op code 5"},
		{"event size not in table", recEvent, []byte{0, 0, 0, 0, 1, 1, 12, 0, 0, 3}, "size code 3"},
		{"event address not in ring", recEvent, []byte{0, sAddr, 0, 0, 1, 1, 12, 0, 0, 1}, "address code 1"},
		{"event unknown fields", recEvent, []byte{0, 0x80, 0x08}, "unknown event fields"},
		{"event nested fields without fold", recEvent, []byte{0, 0x80, 0x02, 0, 0, 1, 1, 12}, "without a nested event"},
		{"event thread id", recEvent, []byte{0, sTID, 0, 0, 1, 1, 12, 1}, "thread id -1"},
		{"event api over 16 bits", recEvent, []byte{0, 0, 0, 0, 1, 1, 0xff, 0xff, 0x04}, "16 bits"},
		{"event block over its limit", recEvent, make([]byte, maxBlockSize+1), "limit"},
		{"second header", recHeader, nil, "second header"},
		{"empty stack", recStack, nil, "ends early"},
		{"huge frame count", recStack, []byte{1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, "list of"},
		{"string past end", recMapping, []byte{1, 1, 1, 1, 1, 100, 'a'}, "ends early"},
		{"id over 32 bits", recMapping, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "overflows"},
		{"type zero", 0, nil, "type 0"},
		{"empty sample", recSample, nil, "ends early"},
		{"huge process count", recSample, []byte{1, 0, 1, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, "list of"},
		{"process cut", recSample, []byte{1, 0, 1, 1, 1, 2, 1, 1, 1, 0x80}, "ends early"},
		{"device index over 32 bits", recDeviceInfo, []byte{0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0, 0}, "overflows"},
		{"boolean not 0 or 1", recNVMLStatus, []byte{1, 2, 0}, "boolean value 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := readAll(t, appendFrame(bytes.Clone(base), tt.typ, tt.payload))
			require.ErrorIs(t, err, ErrCorrupt)
			assert.Contains(t, err.Error(), tt.message)
		})
	}
	// Format 2's events, one a record.
	base2, _, _ := v2Trace(t, testHeader(), nil, nil, 0)
	for _, tt := range []struct {
		name    string
		payload []byte
		message string
	}{
		{"empty event", nil, "ends early"},
		{"event cut", []byte{0, 0, 1, 2, 3}, "ends early"},
		{"event op not in table", []byte{0, 5, 0, 0, 1}, "op code 5"},
		{"event size not in table", []byte{0, 0, 1, 1, 12, 0, 0, 3}, "size code 3"},
		{"event unknown extra", []byte{mExtra, 0x80}, "extra fields"},
		{"event thread id", []byte{mTID, 1}, "thread id -1"},
		{"event api over 16 bits", []byte{0, 0, 1, 1, 0xff, 0xff, 0x04}, "16 bits"},
		{"event over its limit", make([]byte, maxEventSize+1), "limit"},
	} {
		t.Run("version 2 "+tt.name, func(t *testing.T) {
			_, _, err := readAll(t, appendFrame(bytes.Clone(base2), recEvent, tt.payload))
			require.ErrorIs(t, err, ErrCorrupt)
			assert.Contains(t, err.Error(), tt.message)
		})
	}
	t.Run("short version 1 event", func(t *testing.T) {
		_, _, err := readAll(t, appendFrameV1(traceV1(), recEvent, make([]byte, minEventSize-1)))
		require.ErrorIs(t, err, ErrCorrupt)
		assert.Contains(t, err.Error(), "want at least 64")
	})
	t.Run("length not a uvarint", func(t *testing.T) {
		b := append(bytes.Clone(base), recStack, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)
		_, _, err := readAll(t, b)
		require.ErrorIs(t, err, ErrCorrupt)
		assert.Contains(t, err.Error(), "bad record length")
	})
	t.Run("version 1 length over limit", func(t *testing.T) {
		b := append(traceV1(), recStack, 0, 0, 0, 0x7f)
		_, _, err := readAll(t, b)
		require.ErrorIs(t, err, ErrCorrupt)
		assert.Contains(t, err.Error(), "limit")
	})
	t.Run("length over limit", func(t *testing.T) {
		b := append(bytes.Clone(base), recStack, 0x80, 0x80, 0x80, 0x10, 0)
		_, _, err := readAll(t, b)
		require.ErrorIs(t, err, ErrCorrupt)
		assert.Contains(t, err.Error(), "limit")
	})
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestWriterErrors(t *testing.T) {
	_, err := NewWriter(io.Discard, nil)
	require.Error(t, err)

	boom := errors.New("disk full")
	_, err = NewWriter(failWriter{boom}, testHeader())
	require.ErrorIs(t, err, boom)

	w, err := NewWriter(io.Discard, testHeader())
	require.NoError(t, err)
	assert.Error(t, w.Write(testHeader()), "header twice")
	assert.Error(t, w.Write((*Event)(nil)))
	assert.Error(t, w.Write((*Stack)(nil)))
	assert.Error(t, w.Write((*DeviceInfo)(nil)))
	assert.Error(t, w.Write((*Sample)(nil)))
	assert.Error(t, w.Write((*NVMLStatus)(nil)))
	assert.Error(t, w.Write((*Interpreter)(nil)))
	assert.Error(t, w.Write((*TestPhase)(nil)))
	assert.Error(t, w.Write(nil))
	assert.NoError(t, w.Close())
}

func TestWriterSticky(t *testing.T) {
	fw := &switchWriter{}
	w, err := NewWriter(fw, testHeader())
	require.NoError(t, err)
	fw.err = errors.New("disk full")
	for i := range 20000 { // enough to overflow the buffer
		if err = w.Write(testEvent(uint64(i))); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, fw.err)
	fw.err = nil
	assert.ErrorIs(t, w.Write(&Lost{}), err)
	assert.ErrorIs(t, w.Flush(), err)
}

type switchWriter struct{ err error }

func (s *switchWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	return len(p), nil
}

// TestEventsDoNotAllocate guards the hot path in both directions.
func TestEventsDoNotAllocate(t *testing.T) {
	w, err := NewWriter(io.Discard, testHeader())
	require.NoError(t, err)
	ev := testEvent(1)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = w.Write(ev) }))
	// Folded pairs too.
	nested := *ev
	nested.API, nested.Flags = APICuMemAlloc, FlagNested
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = w.Write(&nested); _ = w.Write(ev) }))

	const n = 2000
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = testEvent(uint64(i))
	}
	r, err := NewReader(bytes.NewReader(mustTrace(t, nil, recs...)))
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(n-1, func() { _, _ = r.Next() }))

	for i := range recs {
		if i%2 == 0 {
			nested := *recs[i+1].(*Event)
			nested.API, nested.Flags = APICuMemAlloc, FlagNested
			recs[i] = &nested
		}
	}
	r, err = NewReader(bytes.NewReader(mustTrace(t, nil, recs...)))
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(n-1, func() { _, _ = r.Next() }), "folded pairs")
}

func FuzzReader(f *testing.F) {
	f.Add(mustTrace(f, nil, testRecords()...))
	f.Add(mustTrace(f, &Header{}))
	f.Add([]byte(Magic))
	f.Add(appendFrame(mustTrace(f, nil), recStack, []byte{1, 1, 3, 1, 1, 0, 0, 2}))
	f.Add(mustTrace(f, nil, pairRecords()...))
	// Format 1: hand-made, and as recorded from a scenario.
	f.Add(appendFrameV1(appendFrameV1(traceV1(), recEvent, eventV1(testEvent(1))), recStack, []byte{1, 1, 0}))
	f.Add(mustFixture(f, "vmm"))
	f.Add(mustFixtureV2(f, "vmm"))
	f.Add(mustTrace(f, nil, &Checkpoint{Segment: 2, Totals: []CheckpointTotals{{PID: 7, PeakBytes: 8, PeakTime: 3}},
		Peaks:         []CheckpointPeak{{PID: 7, At: Event{Time: 3, Size: 8}, Live: []PeakClass{{PID: 7, Stack: 1, Size: 8, Count: 1}}}},
		TimelineLevel: 2, Timelines: []CheckpointTimeline{{PID: 7, Buckets: []TimelineBucket{{Index: 1, MinTime: 3, MinBytes: 8, MaxTime: 3, MaxBytes: 8}}}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r, err := NewReader(bytes.NewReader(data))
		if err == nil {
			for i := 0; ; i++ {
				_, err = r.Next()
				if err != nil {
					break
				}
				require.Less(t, i, len(data), "more records than bytes")
			}
		}
		runtime.ReadMemStats(&after)
		// Two 64 KiB buffers and small change, plus what the input itself
		// can justify: decoded lists cost at most ~16 bytes per input byte.
		limit := uint64(1<<20 + 64*len(data))
		assert.Less(t, after.TotalAlloc-before.TotalAlloc, limit, "allocation out of proportion to the input")
	})
}

// BenchmarkWriteRead writes and replays 1e6 events; see the ns/event metric.
func BenchmarkWriteRead(b *testing.B) {
	const n = 1_000_000
	var buf bytes.Buffer
	buf.Grow(n * (frameHead + eventSize + frameTail) * 11 / 10)
	ev := testEvent(1)
	for b.Loop() {
		buf.Reset()
		w, err := NewWriter(&buf, testHeader())
		require.NoError(b, err)
		for i := range n {
			ev.Time = uint64(i)
			if err := w.Write(ev); err != nil {
				b.Fatal(err)
			}
		}
		require.NoError(b, w.Close())
		r, err := NewReader(bytes.NewReader(buf.Bytes()))
		require.NoError(b, err)
		count := 0
		for {
			_, err := r.Next()
			if err != nil {
				break
			}
			count++
		}
		if count != n {
			b.Fatalf("read %d events, want %d", count, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/event")
	b.ReportMetric(float64(buf.Len())/n, "bytes/event")
}

// pairRecords are runtime calls with the driver calls nested in them, as
// the probes record them in effect order: an allocation's nested call
// returns first, a release's enters second. Most fold.
func pairRecords() []Record {
	const pid, tid = 300, 301
	out := []Record{&Stack{ID: 1, PID: pid}}
	ev := func(t, d uint64, api API, kind Kind, addr, size uint64, stack StackID, flags Flags, ret int32) *Event {
		return &Event{Time: t, Duration: d, Addr: addr, Size: size, PID: pid, TID: tid, Stack: stack, Ret: ret,
			Kind: kind, Layer: LayerSegment, API: api, Flags: flags}
	}
	for i := range uint64(4) {
		t, addr := 10_000+i*1000, 0x7f20_0000_0000+i<<21
		out = append(out,
			ev(t, 80, APICuMemAlloc, KindAlloc, addr, 1<<21, 0, FlagNested, 0),
			ev(t+5, 300, APICudaMalloc, KindAlloc, addr, 1<<21, 1, 0, 0),
			ev(t+400, 200, APICudaFree, KindFree, addr, 0, 1, 0, 0),
			ev(t+420, 90, APICuMemFree, KindFree, addr, 0, 2, FlagNested|4, 0))
	}
	// A failed allocation: the driver's error is the runtime's.
	out = append(out,
		ev(20_000, 50, APICuMemAlloc, KindAlloc, 0, 1<<40, 0, FlagNested, 2),
		ev(20_010, 70, APICudaMalloc, KindAlloc, 0, 1<<40, 1, 0, 2),
		// Not a pair: different sizes, then a nested call alone.
		ev(20_100, 50, APICuMemAlloc, KindAlloc, 0x1000, 512, 0, FlagNested, 0),
		ev(20_050, 70, APICudaMalloc, KindAlloc, 0x1000, 1024, 1, 0, 0),
		ev(19_000, 70, APICuMemAlloc, KindAlloc, 0x2000, 1024, 0, FlagNested, 0),
		&Lost{Time: 21_000},
		ev(21_000, 5, APICudaFree, KindFree, 0x2000, 0, 1, 0, 0),
	)
	return out
}

// TestFold checks that nested calls fold into their runtime call (the
// trace is smaller than the same events written unfolded) and read back
// exactly, in order, and that a cut inside a folded record loses the pair.
func TestFold(t *testing.T) {
	want := pairRecords()
	data := mustTrace(t, nil, want...)
	_, got, err := readAll(t, data)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	// A folded pair is decoded at once: the second event waits in next.
	r, err := NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	folded := 0
	for {
		_, err := r.Next()
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		if r.hasNext {
			folded++
		}
	}
	assert.Equal(t, 9, folded, "four allocations, four frees and the failed allocation fold")
	unfolded, _ := chunkedTrace(t, nil, func() (c [][]Record) {
		for _, r := range want {
			c = append(c, []Record{r})
		}
		return c
	}()...)
	assert.Less(t, len(data), len(unfolded)-9*(blockHead+frameTail), "folding saves more than the blocks' framing")

	for cut := len(mustTrace(t, nil)); cut <= len(data); cut++ {
		_, got, err := readAll(t, data[:cut])
		require.NoError(t, err, "cut at %d", cut)
		assert.Equal(t, want[:len(got)], got, "cut at %d: a prefix of what was written", cut)
		// The stack, then nine folded pairs: never half a pair.
		if n := len(got); n >= 1 && n <= 19 {
			assert.Equal(t, 1, n%2, "cut at %d splits a folded pair", cut)
		}
	}
}

// eventsFrom turns fuzz input into a stream of events that exercises the
// format 2 coding: repeated and new values of every field, times that go
// back, nested pairs that fold and near-pairs that must not.
func eventsFrom(data []byte) []Record {
	out := []Record{}
	var prev Event
	next := func(n int) uint64 {
		var v uint64
		for i := 0; i < n && len(data) > 0; i++ {
			v |= uint64(data[0]) << (8 * i)
			data = data[1:]
		}
		return v
	}
	for len(data) > 0 {
		c := next(2)
		ev := prev
		pick := func(bit int, bytes int) (uint64, bool) {
			if c&(1<<bit) == 0 {
				return 0, false
			}
			return next(bytes), true
		}
		if v, ok := pick(0, 8); ok {
			ev.Time = v
		} else {
			ev.Time += uint64(int64(int8(next(1))) * 1000)
		}
		if v, ok := pick(1, 8); ok {
			ev.Addr = v
		}
		if v, ok := pick(2, 8); ok {
			ev.Size = v
		}
		if v, ok := pick(3, 4); ok {
			ev.PID, ev.TID = uint32(v), uint32(v)+uint32(next(1))
		}
		if v, ok := pick(4, 4); ok {
			ev.Device = int32(v)
		}
		if v, ok := pick(5, 3); ok {
			ev.Kind, ev.Layer, ev.API = Kind(v), Layer(v>>8), API(v>>16)
		}
		if v, ok := pick(6, 8); ok {
			ev.Duration, ev.Stream = v, v>>(v&63)
		}
		if v, ok := pick(7, 4); ok {
			ev.Stack, ev.Ret, ev.Flags = StackID(v), int32(v)>>8, Flags(v)
		}
		e := ev
		out = append(out, &e)
		if c&(1<<8) != 0 { // a nested call beside it, maybe not quite a pair
			n := ev
			n.Flags |= FlagNested
			e.Flags &^= FlagNested
			n.Time += uint64(int64(int8(next(1))))
			n.API, n.Duration, n.Stack = API(next(1)), next(2), StackID(next(1)&3)
			if c&(1<<9) != 0 {
				n.Flags = Flags(next(1))
			}
			if c&(1<<10) != 0 {
				n.Size ^= 1
			}
			if c&(1<<11) != 0 {
				out[len(out)-1] = &n
				out = append(out, &e)
			} else {
				out = append(out, &n)
			}
		}
		prev = *out[len(out)-1].(*Event)
		if c&(1<<12) != 0 {
			out = append(out, &Lost{Time: next(1)})
		}
	}
	return out
}

// FuzzEvents writes the events a fuzz input describes and reads them back:
// exactly what was written, and a prefix of it from every cut.
func FuzzEvents(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0xff, 0x1f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
		25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48})
	f.Add([]byte{0x00, 0x01, 5, 1, 0x40, 0, 0, 0x00, 0x09, 7, 9, 1, 0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0x80})
	f.Fuzz(func(t *testing.T, in []byte) {
		want := eventsFrom(in)
		h := &Header{Start: 1 << 40}
		data := mustTrace(t, h, want...)
		r, got, err := readAll(t, data)
		require.NoError(t, err)
		require.False(t, r.Truncated())
		require.Equal(t, want, got)
		if len(data) > 4096 {
			return
		}
		for cut := len(mustTrace(t, h)); cut < len(data); cut++ {
			_, got, err := readAll(t, data[:cut])
			require.NoError(t, err, "cut at %d", cut)
			require.Equal(t, want[:len(got)], got, "cut at %d", cut)
		}
	})
}

// TestFlushWritesHeld: the event the Writer holds back for folding reaches
// the underlying writer on Flush, so that the recorder's flush each second
// bounds what a kill loses, as it did before folding.
func TestFlushWritesHeld(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader())
	require.NoError(t, err)
	nested := &Event{Time: 5, PID: 1, TID: 1, Addr: 0x1000, Size: 64, Kind: KindAlloc, Layer: LayerSegment,
		API: APICuMemAlloc, Flags: FlagNested}
	require.NoError(t, w.Write(nested))
	require.NoError(t, w.Flush())
	_, got, err := readAll(t, buf.Bytes())
	require.NoError(t, err)
	assert.Equal(t, []Record{nested}, got, "no End: the trace of a killed recorder")

	// The runtime call it was nested in arrives after the flush: written
	// on its own, read back in order.
	outer := *nested
	outer.API, outer.Flags, outer.Time = APICudaMalloc, 0, 9
	require.NoError(t, w.Write(&outer))
	require.NoError(t, w.Close())
	_, got, err = readAll(t, buf.Bytes())
	require.NoError(t, err)
	assert.Equal(t, []Record{nested, &outer}, got)
}

// TestOOMReportRoundTrip: an allocator's out-of-memory report (a kind
// appended to the format) keeps its request, allocated and reserved bytes
// (Size, Addr, Stream) and its device through a trace, between the
// failed call it follows and the events after it.
func TestOOMReportRoundTrip(t *testing.T) {
	failed := &Event{Time: 100, Duration: 10, Size: 20 << 20, PID: 7, TID: 8, Ret: 2, Device: 0,
		Kind: KindCreate, Layer: LayerSegment, API: APICuMemCreate}
	report := &Event{Time: 200, Addr: 124 << 20, Size: 96 << 20, Stream: 200 << 20, PID: 7, TID: 8, Stack: 1, Device: 0,
		Kind: KindOOMReport, Layer: LayerBlock, API: APIC10ReportOOM}
	after := testEvent(3)
	stack := &Stack{ID: 1, PID: 7, Frames: []Frame{{Addr: 0x4c340, Function: "c10::reportOutOfMemoryToProfiler"}}}
	data := mustTrace(t, testHeader(), stack, failed, report, after)
	_, recs, err := readAll(t, data)
	require.NoError(t, err)
	require.Len(t, recs, 4)
	assert.Equal(t, report, recs[2])
	assert.Equal(t, "oom_report", KindOOMReport.String())
	assert.Equal(t, "c10::reportOutOfMemoryToProfiler", APIC10ReportOOM.String())
}

// TestScopeRoundTrip: an allocator's emptyCache scope (two kinds appended
// to the format) keeps its rsp (Addr), thread and entry stack through a
// trace, around the segment free made inside it.
func TestScopeRoundTrip(t *testing.T) {
	stack := &Stack{ID: 1, PID: 7, Frames: []Frame{{Addr: 0x4ef60}, {Addr: 0x55c2, Function: "release_every_step"}}}
	begin := &Event{Time: 100, Addr: 0x7ffd_0000_1000, PID: 7, TID: 8, Stack: 1, Device: DeviceUnknown,
		Kind: KindScopeBegin, Layer: LayerBlock, API: APIC10EmptyCache}
	free := &Event{Time: 150, Duration: 20, Addr: 0x7f20_0000_0000, PID: 7, TID: 8, Device: 0,
		Kind: KindFree, Layer: LayerSegment, API: APICudaFree}
	end := &Event{Time: 200, Addr: 0x7ffd_0000_1000, PID: 7, TID: 8, Device: DeviceUnknown,
		Kind: KindScopeEnd, Layer: LayerBlock, API: APIC10EmptyCache}
	data := mustTrace(t, testHeader(), stack, begin, free, end)
	_, recs, err := readAll(t, data)
	require.NoError(t, err)
	require.Len(t, recs, 4)
	assert.Equal(t, []Record{stack, begin, free, end}, recs)
	assert.Equal(t, "scope_begin", KindScopeBegin.String())
	assert.Equal(t, "scope_end", KindScopeEnd.String())
	assert.Equal(t, "c10::cuda::CUDACachingAllocator::emptyCache", APIC10EmptyCache.String())
}

// TestParseTestPhase: PYTEST_CURRENT_TEST's value as pytest writes it,
// "<nodeid> (<phase>)", a node id whose parameters hold " (" too.
func TestParseTestPhase(t *testing.T) {
	tests := []struct{ name, value, id, phase string }{
		{"call", "tests/test_a.py::test_x (call)", "tests/test_a.py::test_x", "call"},
		{"params", "t.py::TestM::test_p[a (b)-2] (setup)", "t.py::TestM::test_p[a (b)-2]", "setup"},
		{"teardown", "t.py::test_q[1] (teardown)", "t.py::test_q[1]", "teardown"},
		{"unset", "", "", ""},
		{"no phase", "t.py::test_q", "t.py::test_q", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, phase := ParseTestPhase(tt.value)
			assert.Equal(t, tt.id, id)
			assert.Equal(t, tt.phase, phase)
		})
	}
}
