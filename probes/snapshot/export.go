package snapshot

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/vramprof/vramprof/probes/event"
)

// smallSegment is PyTorch's small-pool segment size (kSmallBuffer): exported
// segments up to it are "small", larger ones "large".
const smallSegment = 2 << 20

// Exporter builds a Snapshot from an event stream: feed it every record of a
// trace with Add, in order, then call Snapshot. It is not safe for
// concurrent use.
//
// What it exports: device memory allocations and frees at the segment layer
// (not nested calls, not pinned host memory, not the VMM API) as
// segment_alloc/segment_free, and the block layer as alloc, then
// free_requested and free_completed together; a failed block allocation as
// "oom". Segments live at the end become the snapshot's segments, tiled by
// their live blocks and "inactive" blocks for the gaps; a live block inside
// no live segment appears in the traces only. A stream without any
// block-layer event (no PyTorch pool traced) exports each segment as one
// block as well, so the viewer's allocation views show the CUDA calls, and
// its failed segment allocations as "oom". Events of device DeviceUnknown go
// to device 0; every process of the stream goes into one snapshot.
type Exporter struct {
	stacks   map[event.StackID][]Frame
	entries  []entry
	segs     map[liveKey]*liveAlloc
	blocks   map[liveKey]*liveAlloc
	sawBlock bool
}

type liveKey struct {
	pid    uint32
	device int32
	addr   uint64
}

type liveAlloc struct {
	size, stream uint64
	frames       []Frame
}

// entry is a trace entry and the layer it came from.
type entry struct {
	device  int32
	te      TraceEntry
	segment bool // a segment-layer entry
	failed  bool // a failed segment allocation: "oom" only without a block layer
}

// NewExporter returns an empty Exporter.
func NewExporter() *Exporter {
	return &Exporter{stacks: map[event.StackID][]Frame{}, segs: map[liveKey]*liveAlloc{}, blocks: map[liveKey]*liveAlloc{}}
}

// Add consumes one record. Records other than Stack and Event are ignored.
func (x *Exporter) Add(rec event.Record) error {
	switch r := rec.(type) {
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

func (x *Exporter) event(e *event.Event) {
	dev := max(e.Device, 0)
	te := TraceEntry{Size: e.Size, Stream: e.Stream, TimeUS: int64(e.Time / 1000), HasTime: true, Frames: x.stacks[e.Stack]}
	k := liveKey{e.PID, dev, e.Addr}
	switch layer := e.Layer; {
	case layer == event.LayerSegment || layer == event.LayerUnknown:
		if e.Flags&event.FlagNested != 0 {
			return
		}
		switch e.Kind {
		case event.KindAlloc:
			if !e.OK() {
				te.Action = ActionOOM
				x.entries = append(x.entries, entry{device: dev, te: te, segment: true, failed: true})
				return
			}
			if e.Addr == 0 || e.Size == 0 {
				return
			}
			te.Action, te.Addr = ActionSegmentAlloc, e.Addr
			x.segs[k] = &liveAlloc{size: e.Size, stream: e.Stream, frames: te.Frames}
		case event.KindFree:
			a, ok := x.segs[k]
			if !ok || !e.OK() {
				return // freeing what was never seen allocated: nothing to show
			}
			delete(x.segs, k)
			te.Action, te.Addr, te.Size = ActionSegmentFree, e.Addr, a.size
		default:
			return
		}
		x.entries = append(x.entries, entry{device: dev, te: te, segment: true})
	case layer == event.LayerBlock:
		x.sawBlock = true
		switch e.Kind {
		case event.KindAlloc:
			if !e.OK() {
				te.Action, te.DeviceFree = ActionOOM, 0
				x.entries = append(x.entries, entry{device: dev, te: te})
				return
			}
			if e.Addr == 0 || e.Size == 0 {
				return
			}
			te.Action, te.Addr = ActionAlloc, e.Addr
			x.blocks[k] = &liveAlloc{size: e.Size, stream: e.Stream, frames: te.Frames}
			x.entries = append(x.entries, entry{device: dev, te: te})
		case event.KindFree:
			a, ok := x.blocks[k]
			if !ok || !e.OK() {
				return
			}
			delete(x.blocks, k)
			te.Addr, te.Size, te.Stream = e.Addr, a.size, a.stream
			te.Action = ActionFreeRequested
			x.entries = append(x.entries, entry{device: dev, te: te})
			te.Action = ActionFreeCompleted
			x.entries = append(x.entries, entry{device: dev, te: te})
		}
	}
}

// Snapshot returns what the records added so far describe. The Exporter
// stays usable.
func (x *Exporter) Snapshot() *Snapshot {
	s := &Snapshot{}
	ndev := int32(1)
	for _, e := range x.entries {
		ndev = max(ndev, e.device+1)
	}
	for k := range x.segs {
		ndev = max(ndev, k.device+1)
	}
	s.DeviceTraces = make([][]TraceEntry, ndev)
	for i := range s.DeviceTraces {
		s.DeviceTraces[i] = []TraceEntry{} // an empty trace is a list, never None
	}
	mirror := !x.sawBlock
	for _, e := range x.entries {
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

	segKeys := sortedKeys(x.segs)
	blockKeys := sortedKeys(x.blocks)
	bi := 0
	for _, k := range segKeys {
		a := x.segs[k]
		seg := Segment{Device: k.device, Address: k.addr, TotalSize: a.size, Stream: a.stream,
			SegmentType: "large", Frames: a.frames}
		if a.size <= smallSegment {
			seg.SegmentType = "small"
		}
		var inside []liveKey
		blockAt := x.blocks
		if mirror {
			blockAt = map[liveKey]*liveAlloc{k: a} // the segment is its one block
			inside = []liveKey{k}
		} else {
			for bi < len(blockKeys) && keyLess(blockKeys[bi], k) {
				bi++ // a block below this segment: in none
			}
			for j := bi; j < len(blockKeys) && blockKeys[j].pid == k.pid && blockKeys[j].device == k.device &&
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

func keyLess(a, b liveKey) bool {
	return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.device, b.device), cmp.Compare(a.addr, b.addr)) < 0
}

func sortedKeys(m map[liveKey]*liveAlloc) []liveKey {
	keys := make([]liveKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b liveKey) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.device, b.device), cmp.Compare(a.addr, b.addr))
	})
	return keys
}

// Write exports recs (a whole trace, in order) as a snapshot pickle to w.
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
