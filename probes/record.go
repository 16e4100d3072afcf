//go:build linux

package probes

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vramprof/vramprof/probes/event"
)

// Record kinds and flags of bpf/vramprof.bpf.c (enum rec_kind, enum
// rec_flags, generated into bpf_x86_bpfel.go). Below recLoader, a kind is
// an event.Kind.
const (
	recLoader = uint8(bpfRecKindREC_LOADER)
	recFork   = uint8(bpfRecKindREC_FORK)
	recExec   = uint8(bpfRecKindREC_EXEC)
	recExit   = uint8(bpfRecKindREC_EXIT)
	recMapped = uint8(bpfRecKindREC_MAPPED)
	// recTestPhase: PYTEST_CURRENT_TEST set or unset (pytest.go).
	recTestPhase = uint8(bpfRecKindREC_TEST_PHASE)

	recFlagStopped = uint8(bpfRecFlagsREC_F_STOPPED)
	recFlagNested  = uint8(bpfRecFlagsREC_F_NESTED)
	recFlagBlock   = uint8(bpfRecFlagsREC_F_BLOCK)
	recFlagPyTrunc = uint8(bpfRecFlagsREC_F_PY_TRUNC)
	recFlagPyBroke = uint8(bpfRecFlagsREC_F_PY_BROKEN)
)

// lastEventKind is the highest event.Kind the BPF side sends.
const lastEventKind = event.KindSetDevice

// recordHeaderSize is RECORD_HEADER_SIZE in the BPF contract header; the
// user stack follows it.
const recordHeaderSize = 72

// maxFrames is MAX_FRAMES in the BPF contract header.
const maxFrames = 127

// maxPyFrames is MAX_PY_FRAMES in the BPF contract header.
const maxPyFrames = 64

// deviceLost is DEVICE_LOST in the BPF contract (records.h): a record's
// device when its thread chose one that cannot be known (a cuCtxSetCurrent
// of a context not seen made, its current context destroyed). Decoded as
// event.DeviceUnknown with rawRecord.deviceLost set.
const deviceLost = -2

// errShortRecord reports a ring buffer sample smaller than its header says.
var errShortRecord = errors.New("short record")

// rawRecord is one ring buffer sample, decoded but not yet symbolized.
type rawRecord struct {
	ev     event.Event // Stack is not set: stacks are interned later
	kind   uint8
	flags  uint8
	caller uint64 // return address into the probed function's caller
	// stack is the sample's raw user stack, leaf first, then its Python
	// frames, innermost first, as (code, instr) pairs (see the contract
	// header): little-endian uint64s read in place, not copied, so valid
	// until the next read. frames and pyFrames split it.
	stack []byte
	// nframes and npy count the native and the Python frames in stack.
	nframes, npy int
	// deviceLost: ev.Device is event.DeviceUnknown because the thread's
	// device cannot be known, not because it chose none (no default).
	deviceLost bool
}

// frames is the raw user stack, as little-endian uint64s.
func (r *rawRecord) frames() []byte { return r.stack[:8*r.nframes] }

// pyFrames are the raw Python frames, as little-endian uint64s.
func (r *rawRecord) pyFrames() []byte { return r.stack[8*r.nframes:] }

// decodeRecord decodes b, laid out as the BPF contract header says, into r.
// The stacks are left in b (r.stack): decoding copies and allocates
// nothing.
func decodeRecord(b []byte, r *rawRecord) error {
	if len(b) < recordHeaderSize {
		return fmt.Errorf("%w: %d bytes, want at least %d", errShortRecord, len(b), recordHeaderSize)
	}
	le := binary.LittleEndian
	r.ev = event.Event{
		Time:     le.Uint64(b[0:]),
		Duration: le.Uint64(b[8:]),
		Addr:     le.Uint64(b[16:]),
		Size:     le.Uint64(b[24:]),
		Stream:   le.Uint64(b[32:]),
		PID:      le.Uint32(b[40:]),
		TID:      le.Uint32(b[44:]),
		Ret:      int32(le.Uint32(b[48:])),
		Device:   int32(le.Uint32(b[52:])),
		API:      event.API(le.Uint16(b[56:])),
		Layer:    event.LayerSegment,
	}
	r.deviceLost = r.ev.Device == deviceLost
	if r.deviceLost {
		r.ev.Device = event.DeviceUnknown
	}
	r.kind = b[58]
	r.flags = b[59]
	n := int(le.Uint16(b[60:]))
	npy := int(b[63])
	r.caller = le.Uint64(b[64:])
	if n > maxFrames || npy > maxPyFrames || len(b) < recordHeaderSize+8*n+16*npy {
		return fmt.Errorf("%w: %d frames and %d Python frames in %d bytes", errShortRecord, n, npy, len(b))
	}
	r.stack = b[recordHeaderSize : recordHeaderSize+8*n+16*npy]
	r.nframes, r.npy = n, npy
	if r.kind != 0 && event.Kind(r.kind) <= lastEventKind {
		r.ev.Kind = event.Kind(r.kind)
	}
	if r.ev.API == event.APIC10ReportOOM && r.ev.Kind == event.KindAlloc {
		// Probed as an allocation so that usdt_block reads all four
		// arguments (see oomReportProbes): the allocator's report of a
		// request it gave up on, no memory of its own.
		r.ev.Kind = event.KindOOMReport
	}
	if r.ev.API == event.APIC10EmptyCache {
		// A scope probe (see scopeProbes): its entry, probed as an
		// allocation so that usdt_block walks the stack, carries the
		// return address into its caller in Size; a return instruction,
		// probed as a free, only rsp. Neither is memory.
		switch r.ev.Kind {
		case event.KindAlloc:
			r.ev.Kind, r.caller, r.ev.Size = event.KindScopeBegin, r.ev.Size, 0
		case event.KindFree:
			r.ev.Kind = event.KindScopeEnd
			r.ev.Device = event.DeviceUnknown
		}
	}
	if r.flags&recFlagNested != 0 {
		r.ev.Flags = event.FlagNested
	}
	if r.flags&recFlagBlock != 0 {
		r.ev.Layer = event.LayerBlock
	}
	return nil
}

// appendFrames appends to key frames (a raw user stack, little-endian
// uint64s, leaf first) with the direct caller's return address in place.
// A frame-pointer walk that starts at a function's first instruction skips
// the direct caller, since rbp still holds the caller's frame: frames[1] is
// then the caller's caller. Kernels that fix this up themselves already
// have frames[1] == caller, and nothing changes; nor without a caller (0).
func appendFrames(key, frames []byte, caller uint64) []byte {
	if len(frames) == 0 || caller == 0 || len(frames) > 8 && binary.LittleEndian.Uint64(frames[8:]) == caller {
		return append(key, frames...)
	}
	key = append(key, frames[:8]...)
	key = binary.LittleEndian.AppendUint64(key, caller)
	return append(key, frames[8:]...)
}
