package event

// The Event record's coding: version 3's event blocks (written and read),
// version 2's one event per record and version 1's fixed layout (read).
// The layouts are described at the top of trace.go.

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Version 3 shape mask bits (see the top of trace.go).
const (
	sPID = 1 << iota
	sTID
	sDevice
	sStack
	sRet
	sStream
	sAddr
	sFold
	sNestedFirst
	sNestedStack

	sKnown = 1<<iota - 1
)

// Version 2 event mask bits (see the top of trace.go).
const (
	mPID    = 1 << 0
	mTID    = 1 << 1
	mDevice = 1 << 2
	mStack  = 1 << 3
	mRet    = 1 << 4
	mExtra  = 1 << 5
	mAddr   = 1 << 6
	mFold   = 1 << 7

	xStream = 1 << 0
	xFlags  = 1 << 1

	nFirst = 1 << 0
	nStack = 1 << 1
	nFlags = 1 << 2
)

const (
	// maxEventPayload bounds one event's coding (a folded pair included) as
	// this package writes it: a literal shape (about 20 bytes) and every
	// field at its longest varint (about 120), rounded up. The Writer
	// closes a block while this much room is left in its buffer.
	maxEventPayload = 192
	// maxOps, maxSizes and maxShapes cap the event tables (see the top of
	// trace.go). Programs use a few dozen (Kind, Layer, API) triples, as
	// many shapes, and in steady state a few hundred distinct sizes; the
	// caps bound the memory a hostile trace can claim while keeping codes
	// to one or two bytes. Values past a cap are written literally.
	maxOps    = 256
	maxSizes  = 1 << 14
	maxShapes = 1 << 12
	// ringSize is the version 3 address ring: the last addresses an event
	// carried, so that a free (or a reuse) of a recent address is one
	// byte. Distances 1..ringSize-1 are one-byte uvarints.
	ringSize = 128
)

// op is what an event did and where: the op table's entries.
type op struct {
	kind  Kind
	layer Layer
	api   API
}

// shape is what a version 3 event's first byte stands for: which fields
// follow, what it did, its flags, and the same of the nested event folded
// into it (nop and nflags, when mask has sFold).
type shape struct {
	mask          uint16
	flags, nflags Flags
	op, nop       op
}

// eventState is what an event is coded against: the events before it in
// the stream. Writer and Reader update it identically.
type eventState struct {
	time, addr uint64
	pid, tid   uint32
	dev        int32
}

// addrRing is the version 3 address ring of both ends: ring[seq%ringSize]
// is the seq-th address written, so an address seen d addresses ago is
// ring[(seq-d)%ringSize].
type addrRing struct {
	ring [ringSize]uint64
	seq  uint64
}

func (a *addrRing) push(addr uint64) {
	a.ring[a.seq%ringSize] = addr
	a.seq++
}

// encState is the Writer's side of the coding: the tables as maps from
// value to code.
type encState struct {
	st     eventState
	ops    map[op]uint32
	sizes  map[uint64]uint32
	shapes map[shape]uint32
	addrs  addrRing
	// recent caches shapes in front of the map, whose struct key is slow
	// to hash: a steady stream uses a handful of shapes.
	recent [shapeCache]struct {
		s    shape
		code uint32 // the shape's table index + 1; 0 for an empty slot
	}
	// at is a direct-mapped index of the ring: at[addrSlot(a)] is 1 + the
	// seq an address hashing there was last pushed at. A collision only
	// costs a ring hit (the address is written literally), so nothing is
	// ever removed.
	at [2 * ringSize]uint64
}

// shapeCache is the size of encState.recent.
const shapeCache = 64

func newEncState(start uint64) encState {
	return encState{st: eventState{time: start}, ops: make(map[op]uint32), sizes: make(map[uint64]uint32),
		shapes: make(map[shape]uint32)}
}

// addrSlot hashes an address to its slot in encState.at (Fibonacci
// hashing: allocations are aligned, so the low bits carry little).
func addrSlot(addr uint64) int {
	return int((addr * 0x9e3779b97f4a7c15) >> (64 - 8))
}

// shapeSlot hashes a shape to its slot in encState.recent.
func shapeSlot(s *shape) int {
	h := uint32(s.mask) ^ uint32(s.flags)<<3 ^ uint32(s.op.layer)<<9 ^ uint32(s.op.kind)<<11 ^
		uint32(s.op.api)<<5 ^ uint32(s.nop.api)<<13
	return int((h * 0x9e3779b1) >> (32 - 6))
}

// appendEvent appends ev's version 3 coding to p, with nested folded into
// it when not nil, and updates the state.
func (e *encState) appendEvent(p []byte, ev, nested *Event, nestedFirst bool) []byte {
	st := &e.st
	s := shape{flags: ev.Flags, op: op{ev.Kind, ev.Layer, ev.API}}
	if ev.PID != st.pid {
		s.mask |= sPID
	}
	if ev.TID != st.tid {
		s.mask |= sTID
	}
	if ev.Device != st.dev {
		s.mask |= sDevice
	}
	if ev.Stack != 0 {
		s.mask |= sStack
	}
	if ev.Ret != 0 {
		s.mask |= sRet
	}
	if ev.Stream != 0 {
		s.mask |= sStream
	}
	if ev.Addr != 0 {
		s.mask |= sAddr
	}
	if nested != nil {
		s.mask |= sFold
		s.nflags, s.nop = nested.Flags, op{nested.Kind, nested.Layer, nested.API}
		if nestedFirst {
			s.mask |= sNestedFirst
		}
		if nested.Stack != 0 {
			s.mask |= sNestedStack
		}
	}
	p = e.appendShape(p, &s)
	if s.mask&sPID != 0 {
		p = binary.AppendUvarint(p, uint64(ev.PID))
	}
	if s.mask&sTID != 0 {
		p = binary.AppendVarint(p, int64(ev.TID)-int64(ev.PID))
	}
	if s.mask&sDevice != 0 {
		p = binary.AppendVarint(p, int64(ev.Device))
	}
	if s.mask&sStack != 0 {
		p = binary.AppendUvarint(p, uint64(ev.Stack))
	}
	if s.mask&sRet != 0 {
		p = binary.AppendVarint(p, int64(ev.Ret))
	}
	if s.mask&sStream != 0 {
		p = binary.AppendUvarint(p, ev.Stream)
	}
	p = binary.AppendVarint(p, int64(ev.Time-st.time))
	p = binary.AppendUvarint(p, ev.Duration)
	if s.mask&sAddr != 0 {
		p = e.appendAddr(p, ev.Addr)
	}
	p = e.appendSize(p, ev.Size)
	st.time, st.pid, st.tid, st.dev = ev.Time, ev.PID, ev.TID, ev.Device
	if nested != nil {
		p = binary.AppendVarint(p, int64(nested.Time-ev.Time))
		p = binary.AppendUvarint(p, nested.Duration)
		if s.mask&sNestedStack != 0 {
			p = binary.AppendUvarint(p, uint64(nested.Stack))
		}
	}
	return p
}

func (e *encState) appendShape(p []byte, s *shape) []byte {
	c := &e.recent[shapeSlot(s)]
	if c.code > 0 && c.s == *s {
		return binary.AppendUvarint(p, uint64(c.code))
	}
	if i, ok := e.shapes[*s]; ok {
		c.s, c.code = *s, i+1
		return binary.AppendUvarint(p, uint64(i)+1)
	}
	if len(e.shapes) < maxShapes {
		e.shapes[*s] = uint32(len(e.shapes))
	}
	p = append(p, 0)
	p = binary.AppendUvarint(p, uint64(s.mask))
	p = append(p, byte(s.flags))
	p = e.appendOp(p, s.op)
	if s.mask&sFold != 0 {
		p = append(p, byte(s.nflags))
		p = e.appendOp(p, s.nop)
	}
	return p
}

func (e *encState) appendOp(p []byte, o op) []byte {
	if i, ok := e.ops[o]; ok {
		return binary.AppendUvarint(p, uint64(i)+1)
	}
	if len(e.ops) < maxOps {
		e.ops[o] = uint32(len(e.ops))
	}
	p = append(p, 0, byte(o.kind), byte(o.layer))
	return binary.AppendUvarint(p, uint64(o.api))
}

func (e *encState) appendSize(p []byte, size uint64) []byte {
	if i, ok := e.sizes[size]; ok {
		return binary.AppendUvarint(p, uint64(i)+1)
	}
	if len(e.sizes) < maxSizes {
		e.sizes[size] = uint32(len(e.sizes))
	}
	p = append(p, 0)
	return binary.AppendUvarint(p, size)
}

// appendAddr appends a non-zero address: its distance in the ring, or 0
// and its difference from the last non-zero address.
func (e *encState) appendAddr(p []byte, addr uint64) []byte {
	a := &e.addrs
	slot := &e.at[addrSlot(addr)]
	if at := *slot; at > 0 && a.seq-(at-1) < ringSize && a.ring[(at-1)%ringSize] == addr {
		p = binary.AppendUvarint(p, a.seq-(at-1))
	} else {
		p = append(p, 0)
		p = binary.AppendVarint(p, int64(addr-e.st.addr))
	}
	e.st.addr = addr
	*slot = a.seq + 1
	a.push(addr)
	return p
}

// decState is the Reader's side of the coding: the tables as slices
// indexed by code - 1.
type decState struct {
	st     eventState
	ops    []op
	sizes  []uint64
	shapes []shape
	addrs  addrRing
}

// decodeEventV3 decodes one version 3 event (or folded pair) from d into
// ev (and next, when hasNext is set), against and then updating the state.
func (r *Reader) decodeEventV3(d *evDecoder) error {
	ds := &r.dec
	var s *shape
	switch k := d.uvarint(); {
	case k == 0:
		var lit shape
		m := d.uvarint()
		if m&^sKnown != 0 {
			return fmt.Errorf("unknown event fields %#x", m)
		}
		lit.mask = uint16(m)
		lit.flags = Flags(d.byte())
		o, err := ds.op(d)
		if err != nil {
			return err
		}
		lit.op = o
		if lit.mask&sFold != 0 {
			lit.nflags = Flags(d.byte())
			if lit.nop, err = ds.op(d); err != nil {
				return err
			}
		} else if lit.mask&(sNestedFirst|sNestedStack) != 0 {
			return fmt.Errorf("nested event fields %#x without a nested event", m)
		}
		if d.bad {
			return errEvent
		}
		if len(ds.shapes) < maxShapes {
			ds.shapes = append(ds.shapes, lit)
		}
		s = &lit
	case k <= uint64(len(ds.shapes)):
		s = &ds.shapes[k-1]
	default:
		return fmt.Errorf("shape code %d, table of %d", k, len(ds.shapes))
	}
	st := ds.st
	mask := s.mask
	ev := Event{Kind: s.op.kind, Layer: s.op.layer, API: s.op.api, Flags: s.flags}
	if mask&sPID != 0 {
		st.pid = d.u32()
	}
	if mask&sTID != 0 {
		tid := int64(st.pid) + d.varint()
		if tid < 0 || tid > math.MaxUint32 {
			return fmt.Errorf("thread id %d out of range", tid)
		}
		st.tid = uint32(tid)
	}
	if mask&sDevice != 0 {
		st.dev = d.i32()
	}
	ev.PID, ev.TID, ev.Device = st.pid, st.tid, st.dev
	if mask&sStack != 0 {
		ev.Stack = StackID(d.u32())
	}
	if mask&sRet != 0 {
		ev.Ret = d.i32()
	}
	if mask&sStream != 0 {
		ev.Stream = d.uvarint()
	}
	ev.Time = st.time + uint64(d.varint())
	ev.Duration = d.uvarint()
	if mask&sAddr != 0 {
		a := &ds.addrs
		switch k := d.uvarint(); {
		case k == 0:
			ev.Addr = st.addr + uint64(d.varint())
		case k < ringSize && k <= a.seq:
			ev.Addr = a.ring[(a.seq-k)%ringSize]
		default:
			return fmt.Errorf("address code %d, ring of %d", k, min(a.seq, ringSize-1))
		}
		if d.bad {
			return errEvent
		}
		st.addr = ev.Addr
		a.push(ev.Addr)
	}
	if err := ds.size(d, &ev); err != nil {
		return err
	}
	st.time = ev.Time
	if mask&sFold != 0 {
		nested := ev
		nested.Kind, nested.Layer, nested.API, nested.Flags = s.nop.kind, s.nop.layer, s.nop.api, s.nflags
		nested.Stack = 0
		nested.Time = ev.Time + uint64(d.varint())
		nested.Duration = d.uvarint()
		if mask&sNestedStack != 0 {
			nested.Stack = StackID(d.u32())
		}
		if d.bad {
			return errEvent
		}
		if mask&sNestedFirst != 0 {
			r.ev, r.next = nested, ev
		} else {
			r.ev, r.next = ev, nested
		}
		r.hasNext = true
	} else {
		if d.bad {
			return errEvent
		}
		r.ev = ev
	}
	ds.st = st
	return nil
}

// size reads a size code into ev.Size.
func (ds *decState) size(d *evDecoder, ev *Event) error {
	switch k := d.uvarint(); {
	case k == 0:
		ev.Size = d.uvarint()
		if len(ds.sizes) < maxSizes && !d.bad {
			ds.sizes = append(ds.sizes, ev.Size)
		}
	case k <= uint64(len(ds.sizes)):
		ev.Size = ds.sizes[k-1]
	default:
		return fmt.Errorf("size code %d, table of %d", k, len(ds.sizes))
	}
	return nil
}

// op reads an op code.
func (ds *decState) op(d *evDecoder) (op, error) {
	k := d.uvarint()
	if k == 0 {
		o := op{Kind(d.byte()), Layer(d.byte()), 0}
		api := d.uvarint()
		if api > math.MaxUint16 {
			return op{}, fmt.Errorf("api %d overflows 16 bits", api)
		}
		o.api = API(api)
		if len(ds.ops) < maxOps && !d.bad {
			ds.ops = append(ds.ops, o)
		}
		return o, nil
	}
	if k > uint64(len(ds.ops)) {
		return op{}, fmt.Errorf("op code %d, table of %d", k, len(ds.ops))
	}
	return ds.ops[k-1], nil
}

// decodeEventV2 decodes a version 2 event payload into r.ev (and r.next
// when it holds a folded pair), against and then updating r's state.
func (r *Reader) decodeEventV2(p []byte) error {
	ds := &r.dec
	d := evDecoder{b: p}
	mask := d.byte()
	st := ds.st
	var ev Event
	if mask&mPID != 0 {
		st.pid = d.u32()
	}
	if mask&mTID != 0 {
		tid := int64(st.pid) + d.varint()
		if tid < 0 || tid > math.MaxUint32 {
			return fmt.Errorf("thread id %d out of range", tid)
		}
		st.tid = uint32(tid)
	}
	if mask&mDevice != 0 {
		st.dev = d.i32()
	}
	ev.PID, ev.TID, ev.Device = st.pid, st.tid, st.dev
	if mask&mStack != 0 {
		ev.Stack = StackID(d.u32())
	}
	if mask&mRet != 0 {
		ev.Ret = d.i32()
	}
	if mask&mExtra != 0 {
		x := d.byte()
		if x&^(xStream|xFlags) != 0 {
			return fmt.Errorf("unknown extra fields %#x", x)
		}
		if x&xStream != 0 {
			ev.Stream = d.uvarint()
		}
		if x&xFlags != 0 {
			ev.Flags = Flags(d.byte())
		}
	}
	o, err := ds.op(&d)
	if err != nil {
		return err
	}
	ev.Kind, ev.Layer, ev.API = o.kind, o.layer, o.api
	ev.Time = st.time + uint64(d.varint())
	ev.Duration = d.uvarint()
	if mask&mAddr != 0 {
		ev.Addr = st.addr + uint64(d.varint())
		st.addr = ev.Addr
	}
	if err := ds.size(&d, &ev); err != nil {
		return err
	}
	st.time = ev.Time
	if mask&mFold != 0 {
		n := d.byte()
		if n&^(nFirst|nStack|nFlags) != 0 {
			return fmt.Errorf("unknown fold fields %#x", n)
		}
		nested := ev
		nested.Stack, nested.Flags = 0, FlagNested
		no, err := ds.op(&d)
		if err != nil {
			return err
		}
		nested.Kind, nested.Layer, nested.API = no.kind, no.layer, no.api
		nested.Time = ev.Time + uint64(d.varint())
		nested.Duration = d.uvarint()
		if n&nStack != 0 {
			nested.Stack = StackID(d.u32())
		}
		if n&nFlags != 0 {
			nested.Flags = Flags(d.byte())
		}
		if d.bad {
			return errEvent
		}
		if n&nFirst != 0 {
			r.ev, r.next = nested, ev
		} else {
			r.ev, r.next = ev, nested
		}
		r.hasNext = true
	} else {
		if d.bad {
			return errEvent
		}
		r.ev = ev
	}
	ds.st = st
	return nil
}

// evDecoder reads an event's coding. Reads past the end return zeros and
// set bad; range errors set bad too, checked once at the end.
type evDecoder struct {
	b   []byte
	bad bool
}

func (d *evDecoder) byte() byte {
	if len(d.b) == 0 {
		d.bad = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *evDecoder) uvarint() uint64 {
	if len(d.b) > 0 && d.b[0] < 0x80 { // the common one-byte case, inlined
		v := uint64(d.b[0])
		d.b = d.b[1:]
		return v
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *evDecoder) varint() int64 {
	u := d.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (d *evDecoder) u32() uint32 {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.bad = true
	}
	return uint32(v)
}

func (d *evDecoder) i32() int32 {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.bad = true
	}
	return int32(v)
}

func decodeEventV1(ev *Event, p []byte) {
	le := binary.LittleEndian
	_ = p[minEventSize-1] // one bounds check
	*ev = Event{
		Time:     le.Uint64(p[0:]),
		Duration: le.Uint64(p[8:]),
		Addr:     le.Uint64(p[16:]),
		Size:     le.Uint64(p[24:]),
		Stream:   le.Uint64(p[32:]),
		PID:      le.Uint32(p[40:]),
		TID:      le.Uint32(p[44:]),
		Stack:    StackID(le.Uint32(p[48:])),
		Ret:      int32(le.Uint32(p[52:])),
		Device:   int32(le.Uint32(p[56:])),
		Kind:     Kind(p[60]),
		Layer:    Layer(p[61]),
		API:      API(le.Uint16(p[62:])),
	}
	if len(p) > 64 {
		ev.Flags = Flags(p[64])
	}
}
