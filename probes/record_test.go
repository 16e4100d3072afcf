//go:build linux

package probes

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/usdt"
)

// TestRecordLayout pins the BPF contract header's offsets against the
// struct bpf2go generated from the C source.
func TestRecordLayout(t *testing.T) {
	var r bpfRecord
	for _, tc := range []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"time", unsafe.Offsetof(r.Time), 0},
		{"duration", unsafe.Offsetof(r.Duration), 8},
		{"addr", unsafe.Offsetof(r.Addr), 16},
		{"size", unsafe.Offsetof(r.Size), 24},
		{"stream", unsafe.Offsetof(r.Stream), 32},
		{"pid", unsafe.Offsetof(r.Pid), 40},
		{"tid", unsafe.Offsetof(r.Tid), 44},
		{"ret", unsafe.Offsetof(r.Ret), 48},
		{"device", unsafe.Offsetof(r.Device), 52},
		{"api", unsafe.Offsetof(r.Api), 56},
		{"kind", unsafe.Offsetof(r.Kind), 58},
		{"flags", unsafe.Offsetof(r.Flags), 59},
		{"nframes", unsafe.Offsetof(r.Nframes), 60},
		{"shape", unsafe.Offsetof(r.Shape), 62},
		{"npy", unsafe.Offsetof(r.Npy), 63},
		{"caller", unsafe.Offsetof(r.Caller), 64},
		{"stack", unsafe.Offsetof(r.Stack), recordHeaderSize},
	} {
		assert.Equal(t, tc.want, tc.got, tc.name)
	}
	// Native frames, then two u64 per Python frame, in one array.
	assert.GreaterOrEqual(t, len(r.Stack), maxFrames+2*maxPyFrames)
}

// TestDecodeRecord decodes a record laid out by hand per the contract.
func TestDecodeRecord(t *testing.T) {
	le := binary.LittleEndian
	b := make([]byte, recordHeaderSize+3*8+2*16)
	le.PutUint64(b[0:], 1000)        // time
	le.PutUint64(b[8:], 20)          // duration
	le.PutUint64(b[16:], 0x7f0000)   // addr
	le.PutUint64(b[24:], 4096)       // size
	le.PutUint64(b[32:], 7)          // stream
	le.PutUint32(b[40:], 42)         // pid
	le.PutUint32(b[44:], 43)         // tid
	le.PutUint32(b[48:], uint32(2))  // ret
	le.PutUint32(b[52:], 0xffffffff) // device -1
	le.PutUint16(b[56:], uint16(event.APICuMemAlloc))
	b[58] = byte(event.KindAlloc)
	b[59] = recFlagNested
	le.PutUint16(b[60:], 3)
	b[63] = 2 // Python frames
	le.PutUint64(b[64:], 0xc0ffee)
	for i, a := range []uint64{0x100, 0x200, 0x300, 0xc0de1, 0x1_0000_0000_00aa, 0xc0de2, 0xbb} {
		le.PutUint64(b[recordHeaderSize+8*i:], a)
	}
	var r rawRecord
	require.NoError(t, decodeRecord(b, &r))
	assert.Equal(t, event.Event{Time: 1000, Duration: 20, Addr: 0x7f0000, Size: 4096, Stream: 7, PID: 42, TID: 43,
		Ret: 2, Device: -1, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICuMemAlloc,
		Flags: event.FlagNested}, r.ev)
	assert.Equal(t, le64(0x100, 0x200, 0x300), r.frames())
	assert.Equal(t, le64(0xc0de1, 0x1_0000_0000_00aa, 0xc0de2, 0xbb), r.pyFrames())
	assert.Equal(t, uint64(0xc0ffee), r.caller)
	assert.False(t, r.deviceLost, "device -1: none chosen yet")

	// DEVICE_LOST (-2): unknown, and marked so that no default is taken.
	le.PutUint32(b[52:], 0xfffffffe)
	require.NoError(t, decodeRecord(b, &r))
	assert.Equal(t, event.DeviceUnknown, r.ev.Device)
	assert.True(t, r.deviceLost, "device lost")

	// A header that promises more frames than the sample holds.
	require.ErrorIs(t, decodeRecord(b[:recordHeaderSize+8], &r), errShortRecord)
	require.ErrorIs(t, decodeRecord(b[:recordHeaderSize+3*8+16], &r), errShortRecord) // one Python frame short
	require.ErrorIs(t, decodeRecord(b[:10], &r), errShortRecord)
}

func TestAppendFrames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames []uint64
		caller uint64
		want   []uint64
	}{
		{"kernel skipped the caller", []uint64{1, 3, 4}, 2, []uint64{1, 2, 3, 4}},
		{"kernel kept the caller", []uint64{1, 2, 3}, 2, []uint64{1, 2, 3}},
		{"leaf only", []uint64{1}, 2, []uint64{1, 2}},
		{"no caller read", []uint64{1, 3}, 0, []uint64{1, 3}},
		{"no stack", nil, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte{0xaa}
			got := appendFrames(prefix, le64(tc.frames...), tc.caller)
			assert.Equal(t, append([]byte{0xaa}, le64(tc.want...)...), got)
		})
	}
}

// le64 lays out vs as the BPF side does stacks: little-endian uint64s.
func le64(vs ...uint64) []byte {
	b := []byte{}
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// TestRecordKinds pins the C enum rec_kind (through the bpf2go types)
// against event.Kind: a record's kind below REC_LOADER is decoded as the
// event.Kind with the same number, so the two numberings must agree.
func TestRecordKinds(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  bpfRecKind
		want event.Kind
	}{
		{"idle", bpfRecKindREC_IDLE, event.KindInvalid},
		{"alloc", bpfRecKindREC_ALLOC, event.KindAlloc},
		{"free", bpfRecKindREC_FREE, event.KindFree},
		{"host alloc", bpfRecKindREC_HOST_ALLOC, event.KindHostAlloc},
		{"host free", bpfRecKindREC_HOST_FREE, event.KindHostFree},
		{"reserve", bpfRecKindREC_RESERVE, event.KindReserve},
		{"unreserve", bpfRecKindREC_UNRESERVE, event.KindUnreserve},
		{"create", bpfRecKindREC_CREATE, event.KindCreate},
		{"release", bpfRecKindREC_RELEASE, event.KindRelease},
		{"set device", bpfRecKindREC_SET_DEVICE, event.KindSetDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, uint32(tc.want), uint32(tc.rec))
		})
	}
	// The BPF-only kinds lie above every event kind the BPF side sends, so
	// decodeRecord never takes one for an event.
	assert.Equal(t, event.Kind(bpfRecKindREC_SET_DEVICE), lastEventKind)
	for _, k := range []bpfRecKind{bpfRecKindREC_LOADER, bpfRecKindREC_FORK, bpfRecKindREC_EXEC, bpfRecKindREC_EXIT, bpfRecKindREC_MAPPED} {
		assert.Greater(t, uint32(k), uint32(lastEventKind), "kind %d", k)
		assert.LessOrEqual(t, uint32(k), uint32(0xff), "kind %d must fit the record's u8", k)
	}
	// Kinds reach the BPF side through the attach cookie (8 bits): every
	// probed function's kind is an event kind the decoder accepts.
	for _, p := range cudaProbes {
		assert.NotEqual(t, event.KindInvalid, p.Kind, p.Symbol)
		assert.LessOrEqual(t, p.Kind, lastEventKind, p.Symbol)
	}
	for _, p := range usdtProbes {
		assert.LessOrEqual(t, p.Kind, lastEventKind, p.Name)
	}
}

// TestDecodeOOMReport decodes the record usdt_block writes at the entry of
// c10::reportOutOfMemoryToProfiler(size, allocated, reserved, device), as
// oomReportProbes lay its arguments out: an allocator's report of a
// request it gave up on, not an allocation.
func TestDecodeOOMReport(t *testing.T) {
	const (
		request   = 96 << 20  // the request, arg1 (rdi): position 2, Size
		allocated = 124 << 20 // arg2 (rsi): position 0, Addr
		reserved  = 200 << 20 // arg3 (rdx): position 3, Stream
	)
	le := binary.LittleEndian
	b := make([]byte, recordHeaderSize+8)
	le.PutUint64(b[0:], 5000)
	le.PutUint64(b[16:], allocated)
	le.PutUint64(b[24:], request)
	le.PutUint64(b[32:], reserved)
	le.PutUint32(b[40:], 42)
	le.PutUint32(b[44:], 44)
	le.PutUint32(b[52:], 1) // device 1: ch
	le.PutUint16(b[56:], uint16(event.APIC10ReportOOM))
	b[58] = byte(event.KindAlloc) // the cookie's kind: usdt_block reads all four
	b[59] = recFlagBlock
	le.PutUint16(b[60:], 1)
	le.PutUint64(b[recordHeaderSize:], 0x4c340)
	var r rawRecord
	require.NoError(t, decodeRecord(b, &r))
	assert.Equal(t, event.Event{Time: 5000, Addr: allocated, Size: request, Stream: reserved, PID: 42, TID: 44,
		Device: 1, Kind: event.KindOOMReport, Layer: event.LayerBlock, API: event.APIC10ReportOOM}, r.ev)

	// The same kind from any other API stays an allocation.
	le.PutUint16(b[56:], uint16(event.APIPyTorchMalloc))
	require.NoError(t, decodeRecord(b, &r))
	assert.Equal(t, event.KindAlloc, r.ev.Kind)
}

// TestOOMReportArgs pins where usdt_block reads the report's arguments:
// position 0 (Addr) the allocated bytes in rsi, 1 (Device) the device
// index, the byte above the type in cx, 2 (Size) the request in rdi, 3
// (Stream) the reserved bytes in rdx. The offsets are struct pt_regs's
// (bpf/vramprof/usdt.h, reg_value).
func TestOOMReportArgs(t *testing.T) {
	const rsi, rcx, rdi, rdx = 104, 88, 112, 96
	for _, p := range oomReportProbes {
		args, err := usdt.ParseArgs(p.Args)
		require.NoError(t, err)
		spec := usdtSpec(&usdt.Probe{Args: args})
		want := [4]struct {
			off  uint16
			size int8
		}{{rsi, 8}, {rcx + 1, -1}, {rdi, -8}, {rdx, 8}}
		for i, w := range want {
			assert.Equal(t, uint8(bpfUsdtArgKindUSDT_ARG_REG), spec.Args[i].Kind, "%s arg %d", p.Symbol, i)
			assert.Equal(t, w.off, spec.Args[i].RegOff, "%s arg %d: register", p.Symbol, i)
			assert.Equal(t, w.size, spec.Args[i].Size, "%s arg %d: size", p.Symbol, i)
		}
	}
}
