package snapshot

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// smallSegment is PyTorch's small-pool segment size (kSmallBuffer): exported
// segments up to it are "small", larger ones "large".
const smallSegment = 2 << 20

// ErrNoProcess is returned by Exporter.SnapshotOf for a PID with no event
// to export.
var ErrNoProcess = errors.New("no device events of that process")

// Builder builds a Snapshot from an event stream: feed it every record of a
// trace with Add, in order, then call Snapshot or SnapshotOf. It is not
// safe for concurrent use.
//
// A PyTorch snapshot is one process's allocator, so a snapshot holds one
// process instance: addresses of different processes are different memory
// even when equal (forked workers get the same ones), and MemoryViz would
// replay one's segment_alloc over another's live segment. The instances,
// the live segments and each instance's peak are the analysis's own live
// memory model (analysis/ledger): an instance is a PID from its Process
// record (or its first event) until a later Process record of the same PID
// once it had events, an exec or another process given the PID, whose
// memory starts afresh either way. Processes lists them; Snapshot exports
// the default one (see Default), SnapshotOf a chosen PID.
//
// What it exports: device memory allocations and frees at the segment layer
// (not nested calls, not pinned host memory, not the VMM API) as
// segment_alloc/segment_free, and the block layer as alloc, then
// free_requested and free_completed together; a failed block allocation as
// "oom". Segments live at the end become the snapshot's segments, tiled by
// their live blocks and "inactive" blocks for the gaps. A process without
// any block-layer event (no PyTorch pool traced) exports each segment as
// one block as well, so the viewer's allocation views show the CUDA calls,
// and its failed segment allocations as "oom". Events of device
// DeviceUnknown go to device 0.
//
// MemoryViz's segment view places every live block inside a live segment
// at every event, and throws when one lies in none, so a block is exported
// only when a traced segment of its process holds its address when it is
// allocated. The blocks of a segment allocated before tracing began
// (vramprof attached mid-run) are therefore left out, trace entries and
// final state alike: that segment's extent is unknown, and a synthesized
// one would show memory the trace never saw. Process.UntracedBlocks counts
// them; the analysis (report.json, the profile) still counts their bytes.
// A block still live when its segment is freed (lost events) is dropped
// from then on, its later free too, for the same reason.
type Builder struct {
	stacks map[event.StackID][]Frame
	// ledger holds the instances, the live segments and their levels;
	// procs the export state of each instance that had an event, by id.
	ledger *ledger.Ledger
	procs  map[uint32]*proc
	// rootPID is the recording's root process: Header.PID, or in run mode
	// (whose Header is written before the command has a PID) the first
	// Process record's. Valid when hasRoot.
	rootPID uint32
	hasRoot bool
	runMode bool
}

// Process is one process instance with events to export.
type Process struct {
	PID     uint32
	Command []string // from its Process record; nil when none came
	// Start is the Process record's Time, or the first event's when no
	// record described the instance (ns, CLOCK_MONOTONIC).
	Start uint64
	// Instance numbers the instances of one PID with events, from 0 in
	// stream order: more than one means the PID was reused or exec'd.
	Instance int
	// Root says it is the recording's root process (the command run, the
	// PID attached to).
	Root bool
	// PeakBytes is the most segment-layer bytes it had live at once.
	PeakBytes uint64
	// UntracedBlocks counts block allocations left out because no traced
	// segment held them (see Exporter).
	UntracedBlocks uint64
}

// proc is one process instance's export state, beside the ledger's.
type proc struct {
	id      uint32
	entries []entry
	// segs are what the snapshot shows of the segments the ledger holds
	// live, by address.
	segs   map[uint64]*liveAlloc
	blocks map[devAddr]*liveAlloc
	// ranges are the live segments of each device sorted by address, to
	// find the one holding a block.
	ranges   map[int32][]devAddr
	sawBlock bool
	untraced uint64
}

type devAddr struct {
	device int32
	addr   uint64
}

type liveAlloc struct {
	size, stream uint64
	device       int32 // a segment's (DeviceUnknown as 0)
	frames       []Frame
	// seg is the address of a block's segment; blocks counts a segment's
	// live blocks.
	seg    uint64
	blocks int
}

// entry is a trace entry and the layer it came from.
type entry struct {
	device  int32
	te      TraceEntry
	segment bool // a segment-layer entry
	failed  bool // a failed segment allocation: "oom" only without a block layer
}

// NewExporter returns an empty Exporter.
func NewExporter() *Builder {
	return &Builder{stacks: map[event.StackID][]Frame{}, ledger: ledger.New(), procs: map[uint32]*proc{}}
}

// Add consumes one record. Records other than Header, Process, Stack and
// Event are ignored.
func (x *Builder) Add(rec event.Record) error {
	switch r := rec.(type) {
	case *event.Header:
		if r == nil {
			return nil
		}
		x.runMode = r.Mode == "run"
		if r.PID != 0 {
			x.rootPID, x.hasRoot = r.PID, true
		}
	case *event.Process:
		if r != nil {
			x.process(r)
		}
	case *event.Stack:
		if r == nil {
			return nil
		}
		frames := make([]Frame, 0, len(r.Frames))
		for _, f := range r.Frames {
			name := f.Function
			if name == "" {
				name = fmt.Sprintf("0x%x", f.Addr)
			}
			file := f.File
			if file == "" {
				file = "??" // as PyTorch writes an unknown C++ file
			}
			frames = append(frames, Frame{Filename: file, Line: f.Line, Name: name})
		}
		x.stacks[r.ID] = frames
	case *event.Event:
		if r != nil {
			x.event(r)
		}
	}
	return nil
}

// process applies a Process record: the ledger starts the PID's next
// instance, unless the current one has had no event or no record yet,
// which it then describes (a fork child that execs before using CUDA is
// one process).
func (x *Builder) process(r *event.Process) {
	if !x.hasRoot && x.runMode {
		x.rootPID, x.hasRoot = r.PID, true
	}
	x.ledger.Process(r)
}

// proc returns instance id's export state, creating it.
func (x *Builder) proc(id uint32) *proc {
	p := x.procs[id]
	if p == nil {
		p = &proc{id: id, segs: map[uint64]*liveAlloc{}, blocks: map[devAddr]*liveAlloc{},
			ranges: map[int32][]devAddr{}}
		x.procs[id] = p
	}
	return p
}

// segKey is instance id's key space of segments in the ledger.
func segKey(id uint32) ledger.Key {
	return ledger.Key{Inst: id, Layer: event.LayerSegment, Space: ledger.Device}
}

func (x *Builder) event(e *event.Event) {
	id := x.ledger.Active(e.PID, e.Time)
	p := x.proc(id)
	dev := max(e.Device, 0)
	te := TraceEntry{Size: e.Size, Stream: e.Stream, TimeUS: int64(e.Time / 1000), HasTime: true, Frames: x.stacks[e.Stack]}
	k := devAddr{dev, e.Addr}
	switch layer := e.Layer; {
	case layer == event.LayerSegment || layer == event.LayerUnknown:
		if e.Flags&event.FlagNested != 0 {
			return
		}
		switch e.Kind {
		case event.KindAlloc:
			switch ch := x.ledger.Alloc(segKey(id), e); ch.Verdict {
			case ledger.Failed:
				te.Action = ActionOOM
				p.entries = append(p.entries, entry{device: dev, te: te, segment: true, failed: true})
				return
			case ledger.Replaced:
				p.segmentGone(e.Addr) // its free was lost
			case ledger.Added:
			default:
				return
			}
			te.Action, te.Addr = ActionSegmentAlloc, e.Addr
			p.segs[e.Addr] = &liveAlloc{size: e.Size, stream: e.Stream, device: dev, frames: te.Frames}
			r := p.ranges[dev]
			i, _ := slices.BinarySearchFunc(r, k, cmpAddr)
			p.ranges[dev] = slices.Insert(r, i, k)
		case event.KindFree:
			if x.ledger.Free(segKey(id), e).Verdict != ledger.Freed {
				return // freeing what was never seen allocated: nothing to show
			}
			a := p.segs[e.Addr]
			p.segmentGone(e.Addr)
			dev = a.device
			te.Action, te.Addr, te.Size = ActionSegmentFree, e.Addr, a.size
		default:
			return
		}
		p.entries = append(p.entries, entry{device: dev, te: te, segment: true})
	case layer == event.LayerBlock:
		p.sawBlock = true
		switch e.Kind {
		case event.KindAlloc:
			if !e.OK() {
				te.Action, te.DeviceFree = ActionOOM, 0
				p.entries = append(p.entries, entry{device: dev, te: te})
				return
			}
			if e.Addr == 0 || e.Size == 0 {
				return
			}
			seg, ok := p.segmentOf(k)
			if !ok {
				p.untraced++
				return
			}
			if old, ok := p.blocks[k]; ok {
				p.release(dev, old) // its free was lost
			}
			p.segs[seg.addr].blocks++
			te.Action, te.Addr = ActionAlloc, e.Addr
			p.blocks[k] = &liveAlloc{size: e.Size, stream: e.Stream, frames: te.Frames, seg: seg.addr}
			p.entries = append(p.entries, entry{device: dev, te: te})
		case event.KindFree:
			a, ok := p.blocks[k]
			if !ok || !e.OK() {
				return // an untraced block, or one never seen allocated
			}
			delete(p.blocks, k)
			p.release(dev, a)
			te.Addr, te.Size, te.Stream = e.Addr, a.size, a.stream
			te.Action = ActionFreeRequested
			p.entries = append(p.entries, entry{device: dev, te: te})
			te.Action = ActionFreeCompleted
			p.entries = append(p.entries, entry{device: dev, te: te})
		}
	}
}

func cmpAddr(a, b devAddr) int { return cmp.Compare(a.addr, b.addr) }

// segmentOf returns the live segment holding block k's address.
func (p *proc) segmentOf(k devAddr) (devAddr, bool) {
	r := p.ranges[k.device]
	i, found := slices.BinarySearchFunc(r, k, cmpAddr)
	if found {
		return r[i], true
	}
	if i == 0 {
		return devAddr{}, false
	}
	s := r[i-1] // the last segment starting below the block
	return s, k.addr < s.addr+p.segs[s.addr].size
}

// release takes block b out of its segment's count of live blocks.
func (p *proc) release(dev int32, b *liveAlloc) {
	if s := p.segs[b.seg]; s != nil && s.device == dev {
		s.blocks--
	}
}

// segmentGone forgets the live segment at addr and any block still live
// in it.
func (p *proc) segmentGone(addr uint64) {
	a := p.segs[addr]
	k := devAddr{a.device, addr}
	if a.blocks > 0 {
		// Rare (lost events): a walk is affordable.
		for bk, b := range p.blocks {
			if bk.device == k.device && b.seg == k.addr {
				delete(p.blocks, bk)
			}
		}
	}
	delete(p.segs, addr)
	r := p.ranges[k.device]
	if i, ok := slices.BinarySearchFunc(r, k, cmpAddr); ok {
		p.ranges[k.device] = slices.Delete(r, i, i+1)
	}
}

// Processes returns the process instances with anything to export, in the
// order they appeared in the stream.
func (x *Builder) Processes() []Process {
	var out []Process
	seen := map[uint32]int{}
	first := map[uint32]bool{} // PIDs whose first instance, events or not, was seen
	for _, in := range x.ledger.Instances() {
		isFirst := !first[in.PID]
		first[in.PID] = true
		p := x.procs[in.ID]
		if p == nil || len(p.entries) == 0 {
			continue
		}
		var command []string
		if in.Info != nil {
			command = in.Info.Command
		}
		out = append(out, Process{PID: in.PID, Command: command, Start: in.Start, Instance: seen[in.PID],
			// The root is the first process of the root PID.
			Root:      x.hasRoot && in.PID == x.rootPID && isFirst,
			PeakBytes: x.ledger.Level(segKey(in.ID)).Peak, UntracedBlocks: p.untraced})
		seen[in.PID]++
	}
	return out
}

// Default returns the process Snapshot exports: the recording's root
// process when it has events to export, else the one with the highest
// segment-layer peak (the first of equals); false when no process has any.
func (x *Builder) Default() (Process, bool) {
	ps := x.Processes()
	if len(ps) == 0 {
		return Process{}, false
	}
	best := 0
	for i, p := range ps {
		if p.Root {
			return p, true
		}
		if p.PeakBytes > ps[best].PeakBytes {
			best = i
		}
	}
	return ps[best], true
}

// Snapshot returns what the records added so far describe of the default
// process (see Default); an empty snapshot when no process has events. The
// Exporter stays usable.
func (x *Builder) Snapshot() *Snapshot {
	d, ok := x.Default()
	if !ok {
		return (&proc{}).snapshot()
	}
	return x.instance(d).snapshot()
}

// SnapshotOf is Snapshot for the first instance of pid with events (a
// reused PID's later processes are not reachable this way). It returns an
// error matching ErrNoProcess when pid has none.
func (x *Builder) SnapshotOf(pid uint32) (*Snapshot, error) {
	for _, in := range x.ledger.Instances() {
		if p := x.procs[in.ID]; in.PID == pid && p != nil && len(p.entries) > 0 {
			return p.snapshot(), nil
		}
	}
	return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
}

// instance returns the proc Processes described as d.
func (x *Builder) instance(d Process) *proc {
	n := 0
	for _, in := range x.ledger.Instances() {
		p := x.procs[in.ID]
		if in.PID != d.PID || p == nil || len(p.entries) == 0 {
			continue
		}
		if n == d.Instance {
			return p
		}
		n++
	}
	return &proc{}
}

func (p *proc) snapshot() *Snapshot {
	s := &Snapshot{}
	ndev := int32(1)
	for _, e := range p.entries {
		ndev = max(ndev, e.device+1)
	}
	for _, a := range p.segs {
		ndev = max(ndev, a.device+1)
	}
	s.DeviceTraces = make([][]TraceEntry, ndev)
	for i := range s.DeviceTraces {
		s.DeviceTraces[i] = []TraceEntry{} // an empty trace is a list, never None
	}
	mirror := !p.sawBlock
	for _, e := range p.entries {
		tr := &s.DeviceTraces[e.device]
		switch {
		case e.failed:
			if mirror {
				*tr = append(*tr, e.te)
			}
		case mirror && e.te.Action == ActionSegmentAlloc:
			a := e.te
			a.Action = ActionAlloc
			*tr = append(*tr, e.te, a)
		case mirror && e.te.Action == ActionSegmentFree:
			req, done := e.te, e.te
			req.Action, done.Action = ActionFreeRequested, ActionFreeCompleted
			*tr = append(*tr, req, done, e.te)
		default:
			*tr = append(*tr, e.te)
		}
	}

	segKeys := make([]devAddr, 0, len(p.segs))
	for addr, a := range p.segs {
		segKeys = append(segKeys, devAddr{a.device, addr})
	}
	slices.SortFunc(segKeys, cmpKey)
	blockKeys := sortedKeys(p.blocks)
	bi := 0
	for _, k := range segKeys {
		a := p.segs[k.addr]
		seg := Segment{Device: k.device, Address: k.addr, TotalSize: a.size, Stream: a.stream,
			SegmentType: "large", Frames: a.frames}
		if a.size <= smallSegment {
			seg.SegmentType = "small"
		}
		var inside []devAddr
		blockAt := p.blocks
		if mirror {
			blockAt = map[devAddr]*liveAlloc{k: a} // the segment is its one block
			inside = []devAddr{k}
		} else {
			for bi < len(blockKeys) && keyLess(blockKeys[bi], k) {
				bi++ // a block below this segment: in none
			}
			for j := bi; j < len(blockKeys) && blockKeys[j].device == k.device &&
				blockKeys[j].addr < k.addr+a.size; j++ {
				inside = append(inside, blockKeys[j])
			}
		}
		at := k.addr
		for _, bk := range inside {
			b := blockAt[bk]
			if bk.addr < at || bk.addr+b.size > k.addr+a.size {
				continue // overlaps the previous block or the segment's end: not representable
			}
			if bk.addr > at {
				seg.Blocks = append(seg.Blocks, Block{Address: at, Size: bk.addr - at, State: StateInactive})
			}
			seg.Blocks = append(seg.Blocks, Block{Address: bk.addr, Size: b.size, RequestedSize: b.size,
				State: StateActiveAllocated, Frames: b.frames})
			seg.AllocatedSize += b.size
			seg.ActiveSize += b.size
			seg.RequestedSize += b.size
			at = bk.addr + b.size
		}
		if end := k.addr + a.size; at < end {
			seg.Blocks = append(seg.Blocks, Block{Address: at, Size: end - at, State: StateInactive})
		}
		s.Segments = append(s.Segments, seg)
	}
	return s
}

func keyLess(a, b devAddr) bool { return cmpKey(a, b) < 0 }

func cmpKey(a, b devAddr) int {
	return cmp.Or(cmp.Compare(a.device, b.device), cmp.Compare(a.addr, b.addr))
}

func sortedKeys(m map[devAddr]*liveAlloc) []devAddr {
	keys := make([]devAddr, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmpKey)
	return keys
}

// Write exports recs (a whole trace, in order) as a snapshot pickle of
// the default process (see Exporter.Default) to w.
func Write(w io.Writer, recs []event.Record) error {
	x := NewExporter()
	for _, r := range recs {
		if err := x.Add(r); err != nil {
			return err
		}
	}
	return Encode(w, x.Snapshot())
}

// Encode writes s as a protocol 2 pickle in the current generation's
// layout, which torch's pickle.load and MemoryViz.js both read. The output
// depends on s alone.
func Encode(w io.Writer, s *Snapshot) error {
	bw := bufio.NewWriter(w)
	e := &encoder{w: bw}
	e.bytes(opProto, 2)
	e.dict(
		func() {
			e.str("segments")
			e.list(len(s.Segments), func(i int) { e.segment(&s.Segments[i]) })
		},
		func() {
			e.str("device_traces")
			e.list(len(s.DeviceTraces), func(d int) {
				tr := s.DeviceTraces[d]
				e.list(len(tr), func(i int) { e.traceEntry(&tr[i]) })
			})
		},
	)
	e.bytes(opStop)
	if e.err != nil {
		return fmt.Errorf("write snapshot: %w", e.err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	return nil
}

func (e *encoder) frames(fs []Frame) func() {
	return func() {
		e.str("frames")
		e.list(len(fs), func(i int) {
			f := fs[i]
			e.dict(e.kvStr("filename", f.Filename), e.kvInt("line", f.Line), e.kvStr("name", f.Name))
		})
	}
}

func (e *encoder) segment(s *Segment) {
	e.dict(
		e.kvInt("device", int64(s.Device)),
		e.kvUint("address", s.Address),
		e.kvUint("total_size", s.TotalSize),
		e.kvUint("allocated_size", s.AllocatedSize),
		e.kvUint("active_size", s.ActiveSize),
		e.kvUint("requested_size", s.RequestedSize),
		e.kvUint("stream", s.Stream),
		e.kvStr("segment_type", s.SegmentType),
		// A (pool id) pair, as PyTorch writes it: (0, 0) is the default pool.
		func() { e.str("segment_pool_id"); e.int(0); e.int(0); e.bytes(opTuple2) },
		e.kvBool("is_expandable", s.IsExpandable),
		e.frames(s.Frames),
		func() {
			e.str("blocks")
			e.list(len(s.Blocks), func(i int) {
				b := &s.Blocks[i]
				e.dict(
					e.kvUint("address", b.Address),
					e.kvUint("size", b.Size),
					e.kvUint("requested_size", b.RequestedSize),
					e.kvStr("state", b.State),
					e.frames(b.Frames),
				)
			})
		},
	)
}

func (e *encoder) traceEntry(t *TraceEntry) {
	kv := []func(){e.kvStr("action", t.Action)}
	if t.Action == ActionOOM {
		kv = append(kv, e.kvUint("device_free", t.DeviceFree)) // PyTorch puts device_free where addr goes
	} else {
		kv = append(kv, e.kvUint("addr", t.Addr))
	}
	kv = append(kv, e.kvUint("size", t.Size), e.kvUint("stream", t.Stream))
	if t.HasTime {
		kv = append(kv, e.kvInt("time_us", t.TimeUS))
	}
	kv = append(kv, e.frames(t.Frames))
	e.dict(kv...)
}
