package event

// The .vpt trace format, versions 1, 2 and 3.
//
// A trace is written as events arrive, so it must survive being cut short at
// any byte (a crash, a kill -9, a full disk) and must never turn damage into
// plausible-looking records. Every fixed-width integer is little-endian.
//
//	file     = preamble record*
//	preamble = magic[8] "VRAMPROF" | version u16 (1, 2 or 3)
//	record   = type u8 | length | payload[length] | crc u32
//	length   = u32 (version 1) or uvarint (versions 2 and 3)
//
// crc is CRC-32C (Castagnoli) over type, length and payload: every byte of
// the record before it. The first record is always a Header; no other record
// is a Header. A record of type 2 holds one event (or folded pair) in
// versions 1 and 2, and in version 3 a block of events under one crc: as
// many as arrive between two other records or flushes, up to about 4 KiB
// (the writer's choice; a reader takes up to 64 KiB). Record types:
//
//	1 Header   2 Event (block)   3 Stack   4 Mapping   5 Process   6 Library
//	7 Lost     8 End     9 DeviceInfo   10 Sample   11 NVMLStatus
//	12 Interpreter   13 Checkpoint   14 Identity   15 TestPhase
//	0 is never valid (zero-filled garbage)
//
// An Identity (a flight recorder's segment: Recording, Segment,
// PrevFrames, PrevSum) is only ever the second record, right after the
// Header; the Reader reads it with the header (Reader.Identity) and Next
// does not return it. It was added within version 2: older readers skip
// it as a record type they do not know.
//
// TestPhase records were added within version 2: older readers skip them,
// and a trace without them is read as before (pytest tests found from
// stacks, report/pytests).
//
// Frames and Sum. Both ends count the records of a trace, the Header and
// Identity included and an event block as one (Frames), and chain a segment's checksums: Sum is
// CRC-32C over each record's crc (4 bytes, little-endian) in order, kept
// only for a trace with an Identity (0 for another). A segment's
// Identity carries the previous segment's Frames and Sum, so a reader
// tells a segment cut at a record boundary (its End or its rotation
// never reached the disk), or swapped for another, from the one the next
// segment followed.
//
// Every payload but an Event's is its struct's fields in declaration order,
// each one as: unsigned integers as uvarint, signed integers as zig-zag
// varint, booleans as uvarint 0 or 1, strings as uvarint length then the
// bytes (any bytes, not only UTF-8, so paths round-trip exactly), string
// lists as uvarint count then strings. A Checkpoint is Time, Segment,
// Events, FirstTime, Live, totals count, then per totals PID, All, Layer,
// Host, Book, PerDevice, Device (zig-zag), Allocations, Frees, AllocatedBytes, FreedBytes, Failed,
// FailedBytes, UnknownFrees, FailedFrees, PeakBytes, PeakTime, then peaks
// count and per peak PID, All, Layer, Host, PerDevice, Device (zig-zag),
// At's Time, Addr, Size, Device (zig-zag), API, Layer, Stack, class count,
// then per class PID, Stack, Device (zig-zag), Kind, API, Size, Count,
// then TimelineLevel, timelines count and per timeline PID, Layer, Host,
// Device (zig-zag), bucket count, then per bucket Index, MinTime,
// MinBytes, MaxTime, MaxBytes (the peaks, then the timelines, were
// appended later: a payload that ends before them has none, and older
// readers ignore them). Checkpoints were added within
// version 2: older readers skip them, and read the FlagRestored events
// after them as events. A Stack is ID, PID, frame count, then
// per frame Addr, Mapping, Function, File, Line. A Sample is Time, Device,
// TotalBytes, UsedBytes, FreeBytes, process count, then per process PID,
// UsedBytes. A DeviceInfo's ProcessesNote, then its PCIBusID, were
// appended later: a payload that ends before them has none. Empty lists decode as nil. Header.Version is not in the
// payload: it is the preamble's version. All versions share these.
//
// Events are the hot path (millions per trace, ~10k a second from a busy
// trainer), so from version 2 on each event is coded against the events
// before it in the stream; a reader rebuilds each one exactly from the
// records before it. The state both ends keep, reset per stream (not per
// record):
//
//   - the previous event's Time (Header.Start before the first), PID, TID
//     and Device (0 before the first), and the last non-zero Addr (0);
//   - an op table of (Kind, Layer, API) triples and a size table of Sizes,
//     each entry added when it is first written literally, while the table
//     holds fewer than maxOps (256) and maxSizes (16384) entries;
//   - version 3: a shape table (below; maxShapes, 4096 entries, added to
//     the same way) and an address ring: every non-zero Addr an event
//     carries (a folded pair's once), the last ringSize (128) kept.
//
// Events, version 3. An Event record's payload is a block of events back
// to back, none cut across records, at least one. Its length is written
// as a uvarint padded to three bytes (the writer reserves it before the
// block fills); a reader takes any uvarint. Each event is:
//
//	shape  uvarint: k > 0 is the shape table's entry k-1; 0 is a literal
//	       shape: mask uvarint, Flags u8, op, and when mask has sFold the
//	       nested event's Flags u8 and op. op is uvarint k > 0, the op
//	       table's entry k-1, or 0 then Kind u8, Layer u8, API uvarint.
//	[sPID]    PID uvarint     [the previous event's]
//	[sTID]    TID - PID varint [the previous event's TID]
//	[sDevice] Device varint   [the previous event's]
//	[sStack]  Stack uvarint   [0]
//	[sRet]    Ret varint      [0]
//	[sStream] Stream uvarint  [0]
//	time      varint: Time - the previous Time (wrapping)
//	Duration  uvarint
//	[sAddr]   uvarint k: 0 < k < ringSize is the address k back in the
//	          ring (1: the last one); 0 is a literal, Addr - the last
//	          non-zero Addr, varint (wrapping) [Addr 0]
//	size      uvarint: as in version 2
//	[sFold]   the nested event folded into this one (see Folding): its
//	          time, varint, Time - this Time (wrapping); Duration uvarint;
//	          [sNestedStack] Stack uvarint [0]; sNestedFirst set when it
//	          came first in the stream
//
// with the mask bits sPID 1, sTID 2, sDevice 4, sStack 8, sRet 16,
// sStream 32, sAddr 64, sFold 128, sNestedFirst 256, sNestedStack 512. A
// field whose bit is clear takes the value in brackets. The events a shape
// stands for share their kind, layer, API, flags and which fields they
// carry: a steady program has a few dozen, each a one-byte code. Events
// in a block cannot take appended fields (nothing delimits one event from
// the next): an event field added later is a new mask bit, and a reader
// refuses a mask bit it does not know as corrupt, naming it.
//
// Events, version 2: one event (or folded pair) a record. An Event
// payload is:
//
//	mask u8                   bits below; a field whose bit is clear takes
//	                          the value in brackets
//	[mPID]    PID uvarint     [the previous event's]
//	[mTID]    TID - PID varint [the previous event's TID]
//	[mDevice] Device varint   [the previous event's]
//	[mStack]  Stack uvarint   [0]
//	[mRet]    Ret varint      [0]
//	[mExtra]  x u8, then Stream uvarint if x&1 [0], Flags u8 if x&2 [0]
//	op        uvarint: k > 0 is the op table's entry k-1; 0 is a literal
//	          Kind u8, Layer u8, API uvarint
//	time      varint: Time - the previous Time (wrapping; events are in
//	          effect order, mostly rising, but a late one goes back)
//	Duration  uvarint
//	[mAddr]   Addr - the last non-zero Addr, varint (wrapping) [Addr 0]
//	size      uvarint: k > 0 is the size table's entry k-1; 0 is a
//	          literal Size uvarint
//	[mFold]   a nested event folded into this one, below
//
// Folding. libcudart calls libcuda underneath (cudaMalloc calls
// cuMemAlloc_v2), and both are recorded: the driver's call with FlagNested,
// so that the analysis keeps both APIs' books but counts the bytes once.
// When a nested event is next to its outer event in the stream and shares
// its PID, TID, Device, Addr, Size, Stream and Ret (the outer one without
// FlagNested), the pair is coded as one: in version 3, as above; in
// version 2, one record, the outer event's payload with mFold set,
// followed by
//
//	n u8      n&1: the nested event came first in the stream; n&2: a Stack
//	          follows; n&4: a Flags u8 follows [FlagNested]
//	op        as above: the nested event's Kind, Layer and API
//	time      varint: the nested Time - the outer Time (wrapping)
//	Duration  uvarint
//	[n&2] Stack uvarint [0]   [n&4] Flags u8
//
// and the reader returns both, in the order they were written. State after
// a folded pair is the outer event's. In a version 2 Event, bytes past the
// fields a reader knows are ignored (fields appended by a newer minor
// version).
//
// Events, version 1: a fixed 72-byte layout,
//
//	 0 Time u64      8 Duration u64   16 Addr u64     24 Size u64
//	32 Stream u64   40 PID u32        44 TID u32      48 Stack u32
//	52 Ret i32      56 Device i32     60 Kind u8      61 Layer u8
//	62 API u16      64 Flags u8       65..71 reserved (zero)
//
// Flags was appended after the first 64 bytes; an Event of 64 bytes reads
// with Flags 0. This package reads versions 1 and 2 and writes version 3.
//
// Limits: a record's payload is at most MaxRecordSize bytes, a version 3
// event block's 64 KiB and a version 2 Event's 4 KiB, so a damaged length
// is rejected before anything is allocated for it; counts inside a payload
// are checked against the bytes left.
//
// Versioning. The preamble's version is a major version: it changes only on
// an incompatible change, and a reader refuses versions newer than it knows
// (ErrVersion). Version 2 changed the length field and the Event payload,
// version 3 the Event record (a block of events); readers keep reading the
// older versions. Within a major version a writer may:
//   - add record types: a reader skips a record of a type it does not know,
//     once its checksum is verified (so a bad type byte is still caught);
//   - append fields to the end of a payload (a version 2 Event's included,
//     not a version 3 event block's: see above): a reader ignores payload
//     bytes past the fields it knows. A payload that ends before the
//     fields of the version that introduced them is corrupt.
//
// Damage. A trace that ends inside a record (the writer was killed before
// its buffer reached the disk) is a truncated trace: every complete record
// before the cut is returned (every event of every complete block), then
// io.EOF with Reader.Truncated true and Reader.Dropped the bytes of the cut
// record. A block is closed before every flush, so what a flushed writer
// left on disk ends at a record boundary. Any
// other inconsistency (a checksum mismatch, an impossible length, type 0, a
// second header, a payload that does not decode) is ErrCorrupt at the byte
// offset of the damaged record. A damaged length field that points past the
// end of the file cannot be told from a cut, and reads as truncated. Since
// events are coded against the ones before them, nothing after a damaged
// record can be read: the reader stops there, as it always has.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
)

// Magic opens every trace file.
const Magic = "VRAMPROF"

// Version is the trace format's major version written by this package, and
// the newest one its Reader accepts. It reads every older version too.
const Version uint16 = 3

// MaxRecordSize caps one record's payload. Stacks and process records are
// far smaller; the cap exists so that a damaged length field is rejected
// instead of allocated.
const MaxRecordSize = 16 << 20

// Sentinel errors for damaged or foreign input; test with errors.Is.
var (
	// ErrNotTrace means the input does not start with the trace magic.
	ErrNotTrace = errors.New("not a vramprof trace")
	// ErrVersion means the trace was written by a newer, incompatible
	// vramprof.
	ErrVersion = errors.New("unsupported trace version")
	// ErrCorrupt means a record is damaged. The error is a *CorruptError
	// that carries the record's byte offset.
	ErrCorrupt = errors.New("corrupt trace")
	// ErrTruncated means the trace ends before its header does, so there is
	// nothing to replay. A trace cut later is not an error: see
	// Reader.Truncated.
	ErrTruncated = errors.New("trace cut short")
)

// CorruptError reports a damaged record. It matches ErrCorrupt.
type CorruptError struct {
	Offset int64  // byte offset of the damaged record from the start of the file
	Reason string // what is wrong with it
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%v at byte %d: %s (the file was damaged after recording; the records before this point are intact)",
		ErrCorrupt, e.Offset, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Record types. The numbering is part of the trace format: append only.
const (
	recInvalid byte = iota
	recHeader
	recEvent
	recStack
	recMapping
	recProcess
	recLibrary
	recLost
	recEnd
	recDeviceInfo
	recSample
	recNVMLStatus
	recInterpreter
	recCheckpoint
	recIdentity
	recTestPhase
)

const (
	preambleSize = len(Magic) + 2
	frameHead    = 1 + 4 // version 1: type, length u32
	frameTail    = 4     // crc
	eventSize    = 72    // version 1: 64 bytes of format 1's first events, Flags, 7 reserved
	minEventSize = 64    // version 1, read: events written before Flags was appended
	// maxHead is the longest version 2 or 3 frame head: type and a uvarint
	// length up to MaxRecordSize (24 bits: 4 bytes; 5 allowed when read).
	maxHead = 1 + 5
	// minFrame is the shortest version 2 or 3 record: type, length 0, crc.
	minFrame = 1 + 1 + frameTail
	// maxEventSize leaves room for appended Event fields while rejecting a
	// damaged length on the hot record long before MaxRecordSize: one
	// event in version 2.
	maxEventSize = 4 << 10
	// blockSize is where the Writer closes an event block: a damaged or
	// cut block loses its events (about 600), and its framing (8 bytes)
	// is already a small fraction of a byte an event.
	blockSize = 4 << 10
	// maxBlockSize is the longest version 3 event block the Reader takes:
	// room for blocks larger than this Writer's, while a damaged length
	// is still rejected long before MaxRecordSize.
	maxBlockSize = bufSize
	// blockHead is a version 3 event block's head as written: type and a
	// length padded to three uvarint bytes, so that it is reserved before
	// the block is filled and filled in when it closes.
	blockHead = 1 + 3
	// bufSize is the I/O buffer of both ends: big enough that a Flush about
	// once a second is what pushes data out at typical event rates, and that
	// the Reader can decode nearly every record in place.
	bufSize = 64 << 10
)

// castagnoli is hardware-accelerated on amd64 and arm64.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Writer streams records to a trace. It buffers up to 64 KiB: call Flush
// periodically (the recorder does about once a second) to bound what a
// crash can lose, and Close at the end. Events go into one event block
// until another record, a Flush, a full buffer or the block's 4 KiB
// closes it; an event is
// also held back until the next record, Flush or Close, in case it folds
// with the next one. A Writer is not safe for concurrent use.
type Writer struct {
	w   io.Writer
	out []byte // whole records, then the open event block: not yet written to w
	blk int    // offset in out of the open event block; -1 for none
	buf []byte // frames of other records, reused
	err error  // first I/O error; sticky

	enc     encState
	prev    Event // an event not yet written, which may fold with the next
	hasPrev bool

	frames uint64 // records written, the header included
	sum    uint32 // CRC-32C chained over their crcs; a segment's only
	chain  bool   // a segment (an Identity): sum is kept
}

// NewWriter writes the preamble and h to w and flushes them, so that even a
// trace cut short right away is recognisable. h.Version is ignored: the
// trace is written in format Version. Close the Writer when done; it does
// not close w.
func NewWriter(w io.Writer, h *Header) (*Writer, error) {
	return newWriter(w, h, nil)
}

// NewSegmentWriter is NewWriter for a flight recorder's segment: id, the
// segment's Identity, follows the header.
func NewSegmentWriter(w io.Writer, h *Header, id *Identity) (*Writer, error) {
	if id == nil {
		return nil, errors.New("new trace segment writer: nil identity")
	}
	return newWriter(w, h, id)
}

func newWriter(w io.Writer, h *Header, id *Identity) (*Writer, error) {
	if h == nil {
		return nil, errors.New("new trace writer: nil header")
	}
	tw := &Writer{w: w, out: make([]byte, 0, bufSize), blk: -1, enc: newEncState(h.Start), chain: id != nil}
	tw.out = append(tw.out, Magic...)
	tw.out = binary.LittleEndian.AppendUint16(tw.out, Version)
	if err := tw.writeFrame(recHeader, func(e *encoder) { e.header(h) }); err != nil {
		return nil, fmt.Errorf("write trace header: %w", err)
	}
	if id != nil {
		if err := tw.writeFrame(recIdentity, func(e *encoder) { e.identity(id) }); err != nil {
			return nil, fmt.Errorf("write trace identity: %w", err)
		}
	}
	if err := tw.Flush(); err != nil {
		return nil, fmt.Errorf("write trace header: %w", err)
	}
	return tw, nil
}

// Write appends one record. The Header is written by NewWriter and cannot be
// written again. An Event is copied (the caller may reuse it) and held back
// until the next record, Flush or Close, so that a driver call nested in a
// runtime call can be folded into one record with it; an I/O error writing
// it is returned by that later call. After an I/O error every later call
// returns that error.
func (w *Writer) Write(rec Record) error {
	if w.err != nil {
		return w.err
	}
	if ev, ok := rec.(*Event); ok && ev != nil {
		return w.writeEvent(ev)
	}
	if _, ok := rec.(*Header); ok {
		return errors.New("write trace record: the header is written once, by NewWriter")
	}
	typ, enc := recordCoder(rec)
	if enc == nil {
		return fmt.Errorf("write trace record: unsupported record %T (nil or unknown type)", rec)
	}
	if err := w.writePrev(); err != nil {
		return err
	}
	if err := w.writeFrame(typ, enc); err != nil {
		return fmt.Errorf("write trace record: %w", err)
	}
	return nil
}

// recordCoder returns the type and payload encoder of every record but an
// Event or a Header; a nil encoder for those, a nil pointer or an unknown
// type.
func recordCoder(rec Record) (byte, func(*encoder)) {
	var enc func(*encoder)
	var typ byte
	switch r := rec.(type) {
	case *Stack:
		typ, enc = recStack, func(e *encoder) { e.stack(r) }
	case *Mapping:
		typ, enc = recMapping, func(e *encoder) { e.mapping(r) }
	case *Process:
		typ, enc = recProcess, func(e *encoder) { e.process(r) }
	case *Library:
		typ, enc = recLibrary, func(e *encoder) { e.library(r) }
	case *Lost:
		typ, enc = recLost, func(e *encoder) { e.lost(r) }
	case *End:
		typ, enc = recEnd, func(e *encoder) { e.end(r) }
	case *DeviceInfo:
		typ, enc = recDeviceInfo, func(e *encoder) { e.deviceInfo(r) }
	case *Sample:
		typ, enc = recSample, func(e *encoder) { e.sample(r) }
	case *NVMLStatus:
		typ, enc = recNVMLStatus, func(e *encoder) { e.nvmlStatus(r) }
	case *Interpreter:
		typ, enc = recInterpreter, func(e *encoder) { e.interpreter(r) }
	case *Checkpoint:
		typ, enc = recCheckpoint, func(e *encoder) { e.checkpoint(r) }
	case *TestPhase:
		typ, enc = recTestPhase, func(e *encoder) { e.testPhase(r) }
	}
	if enc == nil || isNil(rec) {
		return 0, nil
	}
	return typ, enc
}

// isNil reports whether rec is a typed nil pointer of one of the record
// types, which Write refuses rather than encoding zeros.
func isNil(rec Record) bool {
	switch r := rec.(type) {
	case *Stack:
		return r == nil
	case *Mapping:
		return r == nil
	case *Process:
		return r == nil
	case *Library:
		return r == nil
	case *Lost:
		return r == nil
	case *End:
		return r == nil
	case *DeviceInfo:
		return r == nil
	case *Sample:
		return r == nil
	case *NVMLStatus:
		return r == nil
	case *Interpreter:
		return r == nil
	case *Checkpoint:
		return r == nil
	case *TestPhase:
		return r == nil
	}
	return rec == nil
}

// writeEvent is the hot path: no allocation once the tables are warm. It
// holds ev back, writes it folded with the previous event when they pair up,
// or writes the previous one alone.
func (w *Writer) writeEvent(ev *Event) error {
	if w.hasPrev {
		w.hasPrev = false
		if outer, nested, first, ok := fold(&w.prev, ev); ok {
			return w.emitEvent(outer, nested, first)
		}
		if err := w.emitEvent(&w.prev, nil, false); err != nil {
			return err
		}
	}
	w.prev, w.hasPrev = *ev, true
	return nil
}

// writePrev writes the previous event, if any, before another record.
func (w *Writer) writePrev() error {
	if !w.hasPrev {
		return nil
	}
	w.hasPrev = false
	return w.emitEvent(&w.prev, nil, false)
}

// fold reports whether a and b (a first in the stream) are a call and the
// call nested inside it, with nothing of the nested one lost if written as
// a fold: the outer one, the nested one, and whether the nested came first.
func fold(a, b *Event) (outer, nested *Event, nestedFirst, ok bool) {
	if a.PID != b.PID || a.TID != b.TID || a.Device != b.Device || a.Addr != b.Addr ||
		a.Size != b.Size || a.Stream != b.Stream || a.Ret != b.Ret {
		return nil, nil, false, false
	}
	switch an, bn := a.Flags&FlagNested != 0, b.Flags&FlagNested != 0; {
	case an && !bn:
		return b, a, true, true
	case bn && !an:
		return a, b, false, true
	}
	return nil, nil, false, false
}

// emitEvent appends ev to the open event block, opening one if needed,
// with nested folded into it when not nil. A block closes, and the buffer
// is written, when another event might not fit: the buffer never holds more
// than bufSize bytes, as a bufio.Writer of that size would not.
func (w *Writer) emitEvent(ev, nested *Event, nestedFirst bool) error {
	if w.blk < 0 {
		if len(w.out)+blockHead+maxEventPayload+frameTail > bufSize {
			if err := w.writeOut(); err != nil {
				return err
			}
		}
		w.blk = len(w.out)
		w.out = append(w.out, recEvent, 0, 0, 0)
	}
	w.out = w.enc.appendEvent(w.out, ev, nested, nestedFirst)
	if len(w.out)+maxEventPayload+frameTail > bufSize {
		return w.writeOut()
	}
	if len(w.out)-w.blk >= blockSize {
		w.closeBlock()
	}
	return nil
}

// closeBlock ends the open event block, if any: its length and crc.
func (w *Writer) closeBlock() {
	if w.blk < 0 {
		return
	}
	b := w.out[w.blk:]
	n := len(b) - blockHead
	// A uvarint padded to three bytes: n < bufSize < 1<<21.
	b[1], b[2], b[3] = byte(n)|0x80, byte(n>>7)|0x80, byte(n>>14)
	w.out = binary.LittleEndian.AppendUint32(w.out, crc32.Checksum(b, castagnoli))
	w.count(w.out[w.blk:])
	w.blk = -1
}

// writeOut closes the open block and writes the buffer to the underlying
// writer.
func (w *Writer) writeOut() error {
	w.closeBlock()
	if len(w.out) == 0 {
		return nil
	}
	_, err := w.w.Write(w.out)
	w.out = w.out[:0]
	if err != nil {
		w.err = fmt.Errorf("write trace: %w", err)
		return w.err
	}
	return nil
}

// put appends rec, a whole record, after closing the open block.
func (w *Writer) put(rec []byte) error {
	w.closeBlock()
	if len(w.out)+len(rec) > bufSize {
		if err := w.writeOut(); err != nil {
			return err
		}
	}
	if len(rec) >= bufSize { // bigger than the buffer: straight through
		if _, err := w.w.Write(rec); err != nil {
			w.err = fmt.Errorf("write trace: %w", err)
			return w.err
		}
		return nil
	}
	w.out = append(w.out, rec...)
	return nil
}

// frame turns b, a payload after maxHead reserved bytes, into a version 2 or 3
// record in place (type and length just before the payload, crc after) and
// returns it.
func frame(b []byte, typ byte) []byte {
	n := len(b) - maxHead
	var l [binary.MaxVarintLen32]byte
	ln := binary.PutUvarint(l[:], uint64(n))
	start := maxHead - 1 - ln
	b[start] = typ
	copy(b[start+1:], l[:ln])
	b = b[start:]
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// writeFrame encodes one variable-length record into the reused buffer and
// writes it whole.
func (w *Writer) writeFrame(typ byte, enc func(*encoder)) error {
	e := encoder{b: append(w.buf[:0], make([]byte, maxHead)...)}
	enc(&e)
	n := len(e.b) - maxHead
	if n > MaxRecordSize {
		return fmt.Errorf("record of %d bytes exceeds the %d-byte limit", n, MaxRecordSize)
	}
	w.buf = e.b
	w.closeBlock() // counted before the record that follows it
	return w.put(w.count(frame(e.b, typ)))
}

// count counts rec, a whole record, in Frames and, in a segment, Sum, and
// returns it.
func (w *Writer) count(rec []byte) []byte {
	w.frames++
	if w.chain {
		w.sum = crc32.Update(w.sum, castagnoli, rec[len(rec)-frameTail:])
	}
	return rec
}

// Frames returns how many records were written, the header included and an
// event block as one: once flushed, what a Reader of the whole trace counts
// (Reader.Frames).
func (w *Writer) Frames() uint64 { return w.frames }

// Sum returns the records' chained checksum (see the top of the file): a
// segment's (NewSegmentWriter); 0 for another trace.
func (w *Writer) Sum() uint32 { return w.sum }

// Buffered returns how many bytes wait in the buffer, whole records and the
// open event block (a held-back event not included): what the next Flush
// adds to the underlying writer, but for that event and the block's crc.
func (w *Writer) Buffered() int { return len(w.out) }

// Flush writes buffered records to the underlying writer.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if err := w.writePrev(); err != nil {
		return err
	}
	return w.writeOut()
}

// Close flushes buffered records. It does not close the underlying writer,
// and does not write an End record: the caller writes End when the
// recording stopped cleanly.
func (w *Writer) Close() error {
	return w.Flush()
}

// Reader replays a trace. It is not safe for concurrent use.
type Reader struct {
	br        *bufio.Reader
	h         Header
	ev        Event             // returned by Next for every event, reused
	buf       []byte            // payloads too big to decode in place
	strs      map[string]string // interned frame and mapping strings
	off       int64             // file offset of the next record
	pending   int               // bytes of the current record still to discard
	consumed  int               // bytes of the current record already read
	records   int64
	frames    uint64 // records read, the header and identity included
	sum       uint32 // their chained checksum; a segment's only
	unchained bool   // no Identity: sum is not kept
	id        *Identity
	truncated bool
	dropped   int64 // bytes of the record cut short: from Offset to the end
	err       error // terminal: io.EOF or the first error

	v       uint16   // the file's format version
	dec     decState // versions 2 and 3: what the next event is coded against
	blk     []byte   // version 3: the rest of the current event block
	next    Event    // the second event of a folded pair, returned next
	hasNext bool
}

// NewReader reads and checks the preamble and the header of a trace.
// Errors match ErrNotTrace, ErrVersion, ErrTruncated or ErrCorrupt.
func NewReader(r io.Reader) (*Reader, error) {
	tr := &Reader{br: bufio.NewReaderSize(r, bufSize), strs: make(map[string]string)}
	var pre [preambleSize]byte
	n, err := io.ReadFull(tr.br, pre[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read trace preamble: %w", err)
	}
	got := pre[:min(n, len(Magic))]
	if string(got) != Magic[:len(got)] {
		// Nothing of the file is quoted: it may be anything readable by
		// root (a link to /etc/shadow), and the message goes to a terminal
		// or a CI log.
		return nil, fmt.Errorf("%w (bad magic): give a .vpt file written by vramprof run or attach", ErrNotTrace)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the trace is empty (the recording stopped before it began)", ErrTruncated)
	}
	if n < preambleSize {
		return nil, fmt.Errorf("%w: %d bytes, before the end of the preamble", ErrTruncated, n)
	}
	v := binary.LittleEndian.Uint16(pre[len(Magic):])
	if v == 0 {
		return nil, &CorruptError{Offset: int64(len(Magic)), Reason: "format version 0"}
	}
	if v > Version {
		return nil, fmt.Errorf("%w: the trace is format version %d, this vramprof reads up to %d: upgrade vramprof",
			ErrVersion, v, Version)
	}
	tr.v = v
	tr.off = int64(preambleSize)
	typ, payload, err := tr.frame()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: it ends inside its header record at byte %d", ErrTruncated, tr.off)
		}
		return nil, err
	}
	if typ != recHeader {
		return nil, tr.corrupt("first record is type %d, not a header", typ)
	}
	d := decoder{b: payload}
	d.header(&tr.h)
	if d.err != nil {
		return nil, tr.corrupt("header: %v", d.err)
	}
	tr.h.Version = v
	tr.dec.st.time = tr.h.Start
	// A segment's Identity follows its header. Anything else is left for
	// Next; a damaged or cut Identity is Next's error, like any record's.
	// The header's bytes are done with (its strings are copied): pass
	// them, so that a header as big as the buffer leaves room to look.
	tr.advance()
	if b, err := tr.br.Peek(1); err == nil && b[0] == recIdentity {
		tr.readIdentity()
	}
	if tr.id == nil { // not a segment: no chain, not even the header's
		tr.unchained, tr.sum = true, 0
	}
	return tr, nil
}

// readIdentity reads the Identity record after the header into r.id, or
// the error Next then returns.
func (r *Reader) readIdentity() {
	_, payload, err := r.frame()
	if err != nil {
		r.err = err
		return
	}
	d := decoder{b: payload}
	id := new(Identity)
	d.identity(id)
	if d.err != nil {
		r.err = r.corrupt("identity: %v", d.err)
		return
	}
	r.id = id
}

// Identity returns the segment's Identity, nil for a trace that has none
// (not a flight recorder's segment, or written before segments had one).
func (r *Reader) Identity() *Identity { return r.id }

// Frames returns how many whole records were read, the header (and
// identity) included: after a clean end, all of them (Writer.Frames).
func (r *Reader) Frames() uint64 { return r.frames }

// Sum returns the chained checksum of the records read (Writer.Sum): a
// segment's (one with an Identity); 0 for another trace.
func (r *Reader) Sum() uint32 { return r.sum }

// Header returns the trace's header. Its Version is the file's format
// version.
func (r *Reader) Header() *Header { return &r.h }

// Next returns the next record, or io.EOF at the end of the trace (check
// Truncated to tell a clean end from a cut). A damaged record gives an error
// matching ErrCorrupt, and every later call returns it again.
//
// The *Event returned is reused by the next call: copy it to keep it. Every
// other record is newly allocated and may be kept.
func (r *Reader) Next() (Record, error) {
	if r.hasNext {
		r.hasNext = false
		r.ev = r.next
		r.records++
		return &r.ev, nil
	}
	for r.err == nil {
		if len(r.blk) > 0 {
			d := evDecoder{b: r.blk}
			if err := r.decodeEventV3(&d); err != nil {
				r.err = r.corrupt("event block: %v", err)
				break
			}
			r.blk = d.b
			r.records++
			return &r.ev, nil
		}
		typ, payload, err := r.frame()
		if err != nil {
			r.err = err
			break
		}
		if typ == recEvent && r.v >= 3 {
			if len(payload) == 0 {
				r.err = r.corrupt("empty event block")
				break
			}
			r.blk = payload // valid until the next frame: decoded first
			continue
		}
		rec, err := r.decode(typ, payload)
		if err != nil {
			r.err = err
			break
		}
		if rec == nil { // a record type from a newer minor version
			continue
		}
		r.records++
		return rec, nil
	}
	return nil, r.err
}

// Truncated reports whether the trace ended inside a record: it was cut short
// (the recorder crashed or was killed). Everything before Offset was read.
func (r *Reader) Truncated() bool { return r.truncated }

// Dropped returns, in a truncated trace, how many bytes after Offset were
// not read: the cut record's, to the end of the input. 0 otherwise.
func (r *Reader) Dropped() int64 { return r.dropped }

// Offset returns the file offset just past the last complete record read
// (an event block once its first event is returned): in a truncated trace,
// where the cut record began.
func (r *Reader) Offset() int64 { return r.off + int64(r.pending+r.consumed) }

// Records returns how many records Next has returned, the header excluded.
func (r *Reader) Records() int64 { return r.records }

func (r *Reader) corrupt(format string, args ...any) error {
	return &CorruptError{Offset: r.off, Reason: fmt.Sprintf(format, args...)}
}

// frame reads the next record's frame and checks it, returning its type and
// payload. The payload is only valid until the next call. A clean end or a
// cut gives io.EOF (the latter setting truncated). While a record is being
// decoded r.off is its start, so errors can name it.
func (r *Reader) frame() (byte, []byte, error) {
	r.advance()
	var typ byte
	var n, head int
	if r.v == 1 {
		h, err := r.br.Peek(frameHead)
		if len(h) < frameHead {
			return 0, nil, r.short(len(h), err)
		}
		typ, n, head = h[0], int(binary.LittleEndian.Uint32(h[1:])), frameHead
	} else {
		// A whole record is at least minFrame bytes, and its head at most
		// maxHead: peek what is there of the longest head.
		h, err := r.br.Peek(maxHead)
		if len(h) < minFrame {
			return 0, nil, r.short(len(h), err)
		}
		l, k := binary.Uvarint(h[1:])
		switch {
		case k == 0 && len(h) < maxHead:
			return 0, nil, r.short(len(h), err)
		case k <= 0 || l > math.MaxInt32:
			return 0, nil, r.corrupt("bad record length")
		}
		typ, n, head = h[0], int(l), 1+k
	}
	if typ == recInvalid {
		return 0, nil, r.corrupt("record type 0")
	}
	limit := MaxRecordSize
	switch {
	case typ == recEvent && r.v >= 3:
		limit = maxBlockSize
	case typ == recEvent:
		limit = maxEventSize
	}
	if n > limit {
		return 0, nil, r.corrupt("type %d record claims %d bytes, over its %d-byte limit", typ, n, limit)
	}
	total := head + n + frameTail
	var b []byte
	var err error
	inPlace := total <= r.br.Size()
	if inPlace {
		// Common case: decode in place from the bufio buffer, no copy.
		b, err = r.br.Peek(total)
		if len(b) < total {
			return 0, nil, r.short(len(b), err)
		}
	} else {
		// A record bigger than the buffer: copy it out, growing the buffer
		// only as data actually arrives, so a damaged length on a short
		// file allocates no more than the file holds.
		r.buf = r.buf[:0]
		for len(r.buf) < total {
			chunk := min(total-len(r.buf), max(len(r.buf), bufSize))
			r.buf = slices.Grow(r.buf, chunk)
			m, err := io.ReadFull(r.br, r.buf[len(r.buf):len(r.buf)+chunk])
			r.buf = r.buf[:len(r.buf)+m]
			if err != nil {
				return 0, nil, r.short(len(r.buf), err)
			}
		}
		b = r.buf
	}
	if crc32.Checksum(b[:head+n], castagnoli) != binary.LittleEndian.Uint32(b[head+n:]) {
		return 0, nil, r.corrupt("bad checksum on type %d record of %d bytes", typ, n)
	}
	r.frames++
	if !r.unchained {
		r.sum = crc32.Update(r.sum, castagnoli, b[head+n:total])
	}
	if inPlace {
		r.pending = total
	} else {
		r.consumed = total
	}
	return typ, b[head : head+n], nil
}

// advance passes the current record's bytes: the payload frame returned
// is no longer valid.
func (r *Reader) advance() {
	if r.pending > 0 {
		// Already peeked, so Discard cannot fail.
		_, _ = r.br.Discard(r.pending)
	}
	r.off += int64(r.pending + r.consumed)
	r.pending, r.consumed = 0, 0
}

// short turns a read that ended early into a clean end (no byte of a new
// record), a cut (some bytes), or the underlying I/O error.
func (r *Reader) short(got int, err error) error {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if got > 0 {
			r.truncated, r.dropped = true, int64(got)
		}
		return io.EOF
	}
	return fmt.Errorf("read trace at byte %d: %w", r.off, err)
}

// decode turns a checked payload into a record; nil for a skipped type.
func (r *Reader) decode(typ byte, p []byte) (Record, error) {
	if typ == recEvent {
		if r.v == 2 {
			if err := r.decodeEventV2(p); err != nil {
				return nil, r.corrupt("event: %v", err)
			}
			return &r.ev, nil
		}
		if len(p) < minEventSize {
			return nil, r.corrupt("event of %d bytes, want at least %d", len(p), minEventSize)
		}
		decodeEventV1(&r.ev, p)
		return &r.ev, nil
	}
	d := decoder{b: p, strs: r.strs}
	var rec Record
	switch typ {
	case recHeader:
		return nil, r.corrupt("a second header")
	case recIdentity:
		return nil, r.corrupt("an identity that does not follow the header")
	case recStack:
		s := new(Stack)
		d.stack(s)
		rec = s
	case recMapping:
		m := new(Mapping)
		d.mapping(m)
		rec = m
	case recProcess:
		pr := new(Process)
		d.process(pr)
		rec = pr
	case recLibrary:
		l := new(Library)
		d.library(l)
		rec = l
	case recLost:
		l := new(Lost)
		d.lost(l)
		rec = l
	case recEnd:
		e := new(End)
		d.end(e)
		rec = e
	case recDeviceInfo:
		di := new(DeviceInfo)
		d.deviceInfo(di)
		rec = di
	case recSample:
		sa := new(Sample)
		d.sample(sa)
		rec = sa
	case recNVMLStatus:
		st := new(NVMLStatus)
		d.nvmlStatus(st)
		rec = st
	case recInterpreter:
		in := new(Interpreter)
		d.interpreter(in)
		rec = in
	case recCheckpoint:
		c := new(Checkpoint)
		d.checkpoint(c)
		rec = c
	case recTestPhase:
		tp := new(TestPhase)
		d.testPhase(tp)
		rec = tp
	default:
		return nil, nil // checksum verified: a newer record type, skip it
	}
	if d.err != nil {
		return nil, r.corrupt("type %d record: %v", typ, d.err)
	}
	return rec, nil
}

// encoder appends the variable-length payload encoding to b.
type encoder struct{ b []byte }

func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) str(s string) {
	e.uint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) bool(v bool) {
	if v {
		e.uint(1)
	} else {
		e.uint(0)
	}
}

func (e *encoder) strList(ss []string) {
	e.uint(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}

func (e *encoder) header(h *Header) {
	e.str(h.Tool)
	e.str(h.Mode)
	e.strList(h.Command)
	e.uint(uint64(h.PID))
	e.uint(h.Start)
	e.int(h.WallTime)
	e.str(h.Host)
}

func (e *encoder) identity(id *Identity) {
	e.str(id.Recording)
	e.uint(id.Segment)
	e.uint(id.PrevFrames)
	e.uint(uint64(id.PrevSum))
}

func (d *decoder) identity(id *Identity) {
	id.Recording = d.str()
	id.Segment = d.uint()
	id.PrevFrames = d.uint()
	id.PrevSum = d.u32()
}

func (e *encoder) stack(s *Stack) {
	e.uint(uint64(s.ID))
	e.uint(uint64(s.PID))
	e.uint(uint64(len(s.Frames)))
	for i := range s.Frames {
		f := &s.Frames[i]
		e.uint(f.Addr)
		e.uint(uint64(f.Mapping))
		e.str(f.Function)
		e.str(f.File)
		e.int(f.Line)
	}
}

func (e *encoder) mapping(m *Mapping) {
	e.uint(uint64(m.ID))
	e.uint(uint64(m.PID))
	e.uint(m.Start)
	e.uint(m.Limit)
	e.uint(m.Offset)
	e.str(m.File)
	e.str(m.BuildID)
}

func (e *encoder) process(p *Process) {
	e.uint(uint64(p.PID))
	e.uint(uint64(p.PPID))
	e.strList(p.Command)
	e.str(p.Exe)
	e.uint(p.Time)
	e.str(p.Cgroup)
	e.uint(p.Start)
	e.bool(p.FromStart)
}

func (e *encoder) library(l *Library) {
	e.uint(uint64(l.PID))
	e.str(l.Path)
	e.str(l.BuildID)
	e.strList(l.Symbols)
	e.strList(l.Skipped)
	e.bool(l.StrippedRuntime)
}

func (e *encoder) lost(l *Lost) {
	e.uint(l.Time)
	e.uint(l.Total)
	e.uint(l.Late)
	e.uint(l.Causes.RingFull)
	e.uint(l.Causes.Unpaired)
	e.uint(l.Causes.Malformed)
}

func (e *encoder) end(x *End) {
	e.uint(x.Time)
	e.str(x.Reason)
	e.int(int64(x.ExitCode))
	e.bool(x.StopsCounted)
	e.uint(uint64(len(x.Stops)))
	for _, s := range x.Stops {
		e.uint(uint64(s.PID))
		e.uint(s.Start)
		e.uint(s.Count)
	}
}

func (e *encoder) deviceInfo(x *DeviceInfo) {
	e.int(int64(x.Index))
	e.str(x.Name)
	e.str(x.UUID)
	e.uint(x.TotalBytes)
	e.uint(x.Time)
	e.str(x.ProcessesNote)
	e.str(x.PCIBusID)
}

func (e *encoder) sample(x *Sample) {
	e.uint(x.Time)
	e.int(int64(x.Device))
	e.uint(x.TotalBytes)
	e.uint(x.UsedBytes)
	e.uint(x.FreeBytes)
	e.uint(uint64(len(x.Processes)))
	for _, p := range x.Processes {
		e.uint(uint64(p.PID))
		e.uint(p.UsedBytes)
	}
}

func (e *encoder) nvmlStatus(x *NVMLStatus) {
	e.uint(x.Time)
	e.bool(x.Available)
	e.str(x.Reason)
}

func (e *encoder) interpreter(x *Interpreter) {
	e.uint(uint64(x.PID))
	e.str(x.Name)
	e.str(x.Version)
	e.str(x.Path)
	e.str(x.Note)
}

// decoder reads the variable-length payload encoding. The first failure
// sticks in err and later reads return zero values, so record decoders need
// no error checks between fields.
type decoder struct {
	b    []byte
	err  error
	strs map[string]string // interning table; nil for none
}

var (
	errShort = errors.New("payload ends early")
	errEvent = errors.New("payload ends early or a value overflows its field")
)

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u32() uint32 {
	v := d.uint()
	if v > math.MaxUint32 {
		d.fail(fmt.Errorf("value %d overflows 32 bits", v))
		return 0
	}
	return uint32(v)
}

func (d *decoder) i32() int32 {
	v := d.int()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail(fmt.Errorf("value %d overflows 32 bits", v))
		return 0
	}
	return int32(v)
}

func (d *decoder) bool() bool {
	switch v := d.uint(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail(fmt.Errorf("boolean value %d", v))
		return false
	}
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a list length and checks it against the bytes left, each
// element taking at least min bytes, so garbage cannot ask for a huge slice.
func (d *decoder) count(minSize int) int {
	n := d.uint()
	if n > uint64(len(d.b)/minSize) {
		d.fail(fmt.Errorf("list of %d elements in %d bytes", n, len(d.b)))
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail(errShort)
		return nil
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

func (d *decoder) str() string { return string(d.bytes()) }

// istr is str for strings that repeat across records (function and file
// names): one copy is kept per distinct value.
func (d *decoder) istr() string {
	b := d.bytes()
	if d.strs == nil {
		return string(b)
	}
	if s, ok := d.strs[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	d.strs[s] = s
	return s
}

func (d *decoder) strList() []string {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.str()
	}
	return ss
}

func (d *decoder) header(h *Header) {
	h.Tool = d.str()
	h.Mode = d.str()
	h.Command = d.strList()
	h.PID = d.u32()
	h.Start = d.uint()
	h.WallTime = d.int()
	h.Host = d.str()
}

func (d *decoder) stack(s *Stack) {
	s.ID = StackID(d.u32())
	s.PID = d.u32()
	// A frame is at least five bytes: five fields of at least one byte.
	n := d.count(5)
	if n > 0 {
		s.Frames = make([]Frame, n)
	}
	for i := range s.Frames {
		f := &s.Frames[i]
		f.Addr = d.uint()
		f.Mapping = MappingID(d.u32())
		f.Function = d.istr()
		f.File = d.istr()
		f.Line = d.int()
	}
}

func (d *decoder) mapping(m *Mapping) {
	m.ID = MappingID(d.u32())
	m.PID = d.u32()
	m.Start = d.uint()
	m.Limit = d.uint()
	m.Offset = d.uint()
	m.File = d.istr()
	m.BuildID = d.istr()
}

func (d *decoder) process(p *Process) {
	p.PID = d.u32()
	p.PPID = d.u32()
	p.Command = d.strList()
	p.Exe = d.str()
	p.Time = d.uint()
	if len(d.b) > 0 { // appended fields: absent from older traces
		p.Cgroup = d.str()
		p.Start = d.uint()
	}
	if len(d.b) > 0 {
		p.FromStart = d.bool()
	}
}

func (d *decoder) library(l *Library) {
	l.PID = d.u32()
	l.Path = d.str()
	l.BuildID = d.str()
	l.Symbols = d.strList()
	if len(d.b) > 0 { // appended field: absent from older traces
		l.Skipped = d.strList()
	}
	if len(d.b) > 0 { // appended field: absent from older traces
		l.StrippedRuntime = d.bool()
	}
}

func (d *decoder) lost(l *Lost) {
	l.Time = d.uint()
	l.Total = d.uint()
	if len(d.b) > 0 { // appended field: absent from older traces
		l.Late = d.uint()
	}
	if len(d.b) > 0 { // appended fields: absent from older traces
		l.Causes = LostCauses{RingFull: d.uint(), Unpaired: d.uint(), Malformed: d.uint()}
	}
}

func (d *decoder) end(x *End) {
	x.Time = d.uint()
	x.Reason = d.str()
	x.ExitCode = int(d.int())
	if len(d.b) > 0 { // appended fields: absent from older traces
		x.StopsCounted = d.bool()
		n := d.uint()
		for i := uint64(0); i < n && len(d.b) > 0; i++ {
			x.Stops = append(x.Stops, ProcessStops{PID: d.u32(), Start: d.uint(), Count: d.uint()})
		}
	}
}

func (d *decoder) deviceInfo(x *DeviceInfo) {
	x.Index = d.i32()
	x.Name = d.str()
	x.UUID = d.str()
	x.TotalBytes = d.uint()
	x.Time = d.uint()
	if len(d.b) > 0 { // appended fields: absent from older traces
		x.ProcessesNote = d.str()
	}
	if len(d.b) > 0 {
		x.PCIBusID = d.str()
	}
}

func (d *decoder) sample(x *Sample) {
	x.Time = d.uint()
	x.Device = d.i32()
	x.TotalBytes = d.uint()
	x.UsedBytes = d.uint()
	x.FreeBytes = d.uint()
	// A process is at least two bytes: two fields of at least one byte.
	n := d.count(2)
	if n > 0 {
		x.Processes = make([]ProcessUsage, n)
	}
	for i := range x.Processes {
		x.Processes[i].PID = d.u32()
		x.Processes[i].UsedBytes = d.uint()
	}
}

func (d *decoder) nvmlStatus(x *NVMLStatus) {
	x.Time = d.uint()
	x.Available = d.bool()
	x.Reason = d.str()
}

func (d *decoder) interpreter(x *Interpreter) {
	x.PID = d.u32()
	x.Name = d.str()
	x.Version = d.str()
	x.Path = d.str()
	x.Note = d.str()
}

func (e *encoder) testPhase(x *TestPhase) {
	e.uint(x.Time)
	e.uint(uint64(x.PID))
	e.uint(uint64(x.TID))
	e.str(x.NodeID)
	e.str(x.Phase)
}

func (d *decoder) testPhase(x *TestPhase) {
	x.Time = d.uint()
	x.PID = d.u32()
	x.TID = d.u32()
	x.NodeID = d.istr()
	x.Phase = d.istr()
}

func (e *encoder) checkpoint(c *Checkpoint) {
	e.uint(c.Time)
	e.uint(c.Segment)
	e.uint(c.Events)
	e.uint(c.FirstTime)
	e.uint(c.Live)
	e.uint(uint64(len(c.Totals)))
	for i := range c.Totals {
		t := &c.Totals[i]
		e.uint(uint64(t.PID))
		e.bool(t.All)
		e.uint(uint64(t.Layer))
		e.bool(t.Host)
		e.uint(uint64(t.Book))
		e.bool(t.PerDevice)
		e.int(int64(t.Device))
		for _, v := range [...]uint64{t.Allocations, t.Frees, t.AllocatedBytes, t.FreedBytes, t.Failed,
			t.FailedBytes, t.UnknownFrees, t.FailedFrees, t.PeakBytes, t.PeakTime} {
			e.uint(v)
		}
	}
	e.uint(uint64(len(c.Peaks)))
	for i := range c.Peaks {
		p := &c.Peaks[i]
		e.uint(uint64(p.PID))
		e.bool(p.All)
		e.uint(uint64(p.Layer))
		e.bool(p.Host)
		e.bool(p.PerDevice)
		e.int(int64(p.Device))
		a := &p.At
		e.uint(a.Time)
		e.uint(a.Addr)
		e.uint(a.Size)
		e.int(int64(a.Device))
		e.uint(uint64(a.API))
		e.uint(uint64(a.Layer))
		e.uint(uint64(a.Stack))
		e.uint(uint64(len(p.Live)))
		for _, l := range p.Live {
			e.uint(uint64(l.PID))
			e.uint(uint64(l.Stack))
			e.int(int64(l.Device))
			e.uint(uint64(l.Kind))
			e.uint(uint64(l.API))
			e.uint(l.Size)
			e.uint(l.Count)
		}
	}
	e.uint(c.TimelineLevel)
	e.uint(uint64(len(c.Timelines)))
	for i := range c.Timelines {
		tl := &c.Timelines[i]
		e.uint(uint64(tl.PID))
		e.uint(uint64(tl.Layer))
		e.bool(tl.Host)
		e.int(int64(tl.Device))
		e.uint(uint64(len(tl.Buckets)))
		for _, b := range tl.Buckets {
			for _, v := range [...]uint64{b.Index, b.MinTime, b.MinBytes, b.MaxTime, b.MaxBytes} {
				e.uint(v)
			}
		}
	}
}

func (d *decoder) checkpoint(c *Checkpoint) {
	c.Time = d.uint()
	c.Segment = d.uint()
	c.Events = d.uint()
	c.FirstTime = d.uint()
	c.Live = d.uint()
	// Each totals entry is at least 17 bytes (one per field).
	n := d.count(17)
	for range n {
		var t CheckpointTotals
		t.PID = d.u32()
		t.All = d.bool()
		t.Layer = Layer(d.uint())
		t.Host = d.bool()
		t.Book = uint8(d.uint())
		t.PerDevice = d.bool()
		t.Device = d.i32()
		for _, v := range [...]*uint64{&t.Allocations, &t.Frees, &t.AllocatedBytes, &t.FreedBytes, &t.Failed,
			&t.FailedBytes, &t.UnknownFrees, &t.FailedFrees, &t.PeakBytes, &t.PeakTime} {
			*v = d.uint()
		}
		c.Totals = append(c.Totals, t)
	}
	if len(d.b) == 0 {
		return // written before Peaks were added
	}
	// Each peak is at least 14 bytes, each class 7.
	n = d.count(14)
	for range n {
		var p CheckpointPeak
		p.PID = d.u32()
		p.All = d.bool()
		p.Layer = Layer(d.uint())
		p.Host = d.bool()
		p.PerDevice = d.bool()
		p.Device = d.i32()
		a := &p.At
		a.Time = d.uint()
		a.Addr = d.uint()
		a.Size = d.uint()
		a.Device = d.i32()
		a.API = API(d.uint())
		a.Layer = Layer(d.uint())
		a.Stack = StackID(d.u32())
		m := d.count(7)
		for range m {
			var l PeakClass
			l.PID = d.u32()
			l.Stack = StackID(d.u32())
			l.Device = d.i32()
			l.Kind = Kind(d.uint())
			l.API = API(d.uint())
			l.Size = d.uint()
			l.Count = d.uint()
			p.Live = append(p.Live, l)
		}
		c.Peaks = append(c.Peaks, p)
	}
	if len(d.b) == 0 {
		return // written before the timelines were added
	}
	c.TimelineLevel = d.uint()
	// Each timeline is at least 5 bytes, each bucket 5.
	n = d.count(5)
	for range n {
		var tl CheckpointTimeline
		tl.PID = d.u32()
		tl.Layer = Layer(d.uint())
		tl.Host = d.bool()
		tl.Device = d.i32()
		m := d.count(5)
		for range m {
			var b TimelineBucket
			for _, v := range [...]*uint64{&b.Index, &b.MinTime, &b.MinBytes, &b.MaxTime, &b.MaxBytes} {
				*v = d.uint()
			}
			tl.Buckets = append(tl.Buckets, b)
		}
		c.Timelines = append(c.Timelines, tl)
	}
}
