package snapshot

import (
	"cmp"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/vramprof/vramprof/probes/event"
)

// PID is the process ID imported events carry: a snapshot does not say
// which process it came from.
const PID = 0

// ReasonUntimed is the End reason of a snapshot whose trace entries carry
// no time_us: its event times are an order only. It is
// analysis.EndReasonUntimed (this package does not import analysis).
const ReasonUntimed = "snapshot without times"

// Command is the imported Process record's command line.
var Command = []string{"torch.cuda.memory._snapshot()"}

// retOOM is cudaErrorMemoryAllocation, the return code an "oom" action is
// imported with.
const retOOM = 2

// Read decodes a snapshot pickle (see Decode) and returns its records, as
// Snapshot.Records does.
func Read(r io.Reader) ([]event.Record, error) {
	s, err := Decode(r)
	if err != nil {
		return nil, err
	}
	return s.Records(), nil
}

// op is one trace entry on its way to becoming events.
type op struct {
	time   uint64
	device int32
	index  int // within its device's trace, for a stable order
	te     *TraceEntry
}

// rangeKey is a live allocation in the replay: layer, device, address.
type rangeKey struct {
	layer  event.Layer
	device int32
	addr   uint64
}

// Records converts the snapshot into an event stream: a Header (Mode
// "import"), one Process (PID 0: unknown), Stack records and Events, then
// an End. The mapping of trace actions:
//
//	segment_alloc, segment_free  KindAlloc, KindFree  LayerSegment  cudaMalloc, cudaFree
//	segment_map, segment_unmap   KindAlloc, KindFree  LayerSegment  cuMemMap, cuMemUnmap
//	alloc, free_completed        KindAlloc, KindFree  LayerBlock    pytorch:malloc, pytorch:free
//	oom                          KindAlloc, Ret 2, Size the request  LayerBlock pytorch:malloc
//	free_requested, snapshot, empty_cache, others: not events (a block
//	stays live until its free completes, as in the allocator)
//
// Times are time_us x 1000 ns, or the entry's index (x 1000) in its device's
// trace when the snapshot has no times. Traces are a ring buffer, so memory
// allocated before the oldest entry is imported as allocations at the
// stream's start: a free of an address the trace never allocated, and every
// segment range and live block (active_allocated or active_pending_free) of
// the snapshot not live at the end of the replay. The live set at the end
// then equals the snapshot's. An unmap that covers part of a mapped range
// frees the range and reallocates what is left of it.
func (s *Snapshot) Records() []event.Record {
	var ops []op
	timed := false
	for d, trace := range s.DeviceTraces {
		for i := range trace {
			te := &trace[i]
			t := uint64(i+1) * 1000
			if te.HasTime {
				t = uint64(max(te.TimeUS, 0)) * 1000
				timed = true
			}
			ops = append(ops, op{time: t, device: int32(d), index: i, te: te})
		}
	}
	slices.SortStableFunc(ops, func(a, b op) int {
		return cmp.Or(cmp.Compare(a.time, b.time), cmp.Compare(a.device, b.device), cmp.Compare(a.index, b.index))
	})
	start := uint64(0)
	if len(ops) > 0 {
		start = ops[0].time
	}

	b := &builder{stacks: map[string]event.StackID{}, shared: map[*Frame]event.StackID{}, live: map[rangeKey]uint64{}}
	b.events = make([]event.Event, 0, len(ops))
	for _, o := range ops {
		b.apply(o)
	}
	// Memory the snapshot holds that the replay does not: allocated before
	// the trace began. Room for all of it at once (a segment's gap, and
	// its blocks): grown by append, the events of a snapshot of many
	// blocks would leave four times themselves in garbage behind.
	room := 0
	for i := range s.Segments {
		room += 1 + len(s.Segments[i].Blocks)
	}
	b.initial = slices.Grow(b.initial, room)
	for i := range s.Segments {
		seg := &s.Segments[i]
		for _, gap := range b.uncovered(seg.Device, seg.Address, seg.TotalSize) {
			b.initial = append(b.initial, b.event(start, event.KindAlloc, event.LayerSegment, event.APICudaMalloc,
				seg.Device, gap[0], gap[1], seg.Stream, seg.Frames))
		}
		for j := range seg.Blocks {
			blk := &seg.Blocks[j]
			k := rangeKey{event.LayerBlock, seg.Device, blk.Address}
			if _, ok := b.live[k]; !blk.Live() || ok || blk.Size == 0 {
				continue
			}
			frames := blk.Frames
			if len(frames) == 0 && len(blk.History) > 0 {
				frames = blk.History[len(blk.History)-1].Frames
			}
			b.initial = append(b.initial, b.event(start, event.KindAlloc, event.LayerBlock, event.APIPyTorchMalloc,
				seg.Device, blk.Address, blk.Size, seg.Stream, frames))
		}
	}
	for i := range b.initial {
		b.initial[i].Time = start
	}
	// Segments before the blocks inside them, as the allocator made them.
	slices.SortStableFunc(b.initial, func(x, y event.Event) int {
		return cmp.Or(cmp.Compare(x.Layer, y.Layer), cmp.Compare(x.Device, y.Device), cmp.Compare(x.Addr, y.Addr))
	})

	end := start
	if len(ops) > 0 {
		end = ops[len(ops)-1].time
	}
	recs := make([]event.Record, 0, 3+len(b.stackRecs)+len(b.initial)+len(b.events))
	recs = append(recs,
		&event.Header{Version: event.Version, Tool: "vramprof import", Mode: "import", Command: Command, PID: PID, Start: start},
		&event.Process{PID: PID, Command: Command, Time: start})
	for i := range b.stackRecs {
		recs = append(recs, &b.stackRecs[i])
	}
	for i := range b.initial {
		recs = append(recs, &b.initial[i])
	}
	for i := range b.events {
		recs = append(recs, &b.events[i])
	}
	// Without time_us the times are an order only: the End says so
	// (analysis.EndReasonUntimed), and the outputs print no times.
	reason := "snapshot"
	if !timed && len(ops) > 0 {
		reason = ReasonUntimed
	}
	return append(recs, &event.End{Time: end, Reason: reason})
}

// builder replays trace entries into events.
type builder struct {
	stacks    map[string]event.StackID
	shared    map[*Frame]event.StackID // by the first frame's address
	stackRecs []event.Stack
	live      map[rangeKey]uint64 // size of each live allocation
	initial   []event.Event       // allocations made before the trace began
	events    []event.Event
}

func (b *builder) stack(frames []Frame) event.StackID {
	if len(frames) == 0 {
		return 0
	}
	// Decode shares one []Frame between equal tracebacks: found by
	// identity, a traceback's key is built once.
	if id, ok := b.shared[&frames[0]]; ok {
		return id
	}
	id := b.stackByKey(frames)
	b.shared[&frames[0]] = id
	return id
}

func (b *builder) stackByKey(frames []Frame) event.StackID {
	var key strings.Builder
	for _, f := range frames {
		key.WriteString(f.Filename + "\x00" + strconv.FormatInt(f.Line, 10) + "\x00" + f.Name + "\x00")
	}
	if id, ok := b.stacks[key.String()]; ok {
		return id
	}
	id := event.StackID(len(b.stackRecs) + 1)
	st := event.Stack{ID: id, PID: PID}
	for _, f := range frames {
		st.Frames = append(st.Frames, event.Frame{Function: f.Name, File: f.Filename, Line: f.Line})
	}
	b.stackRecs = append(b.stackRecs, st)
	b.stacks[key.String()] = id
	return id
}

func (b *builder) event(t uint64, k event.Kind, l event.Layer, api event.API, dev int32, addr, size, stream uint64, frames []Frame) event.Event {
	return event.Event{Time: t, Addr: addr, Size: size, Stream: stream, PID: PID, TID: PID,
		Stack: b.stack(frames), Device: dev, Kind: k, Layer: l, API: api}
}

func (b *builder) alloc(t uint64, l event.Layer, api event.API, dev int32, addr, size, stream uint64, frames []Frame) {
	b.events = append(b.events, b.event(t, event.KindAlloc, l, api, dev, addr, size, stream, frames))
	b.live[rangeKey{l, dev, addr}] = size
}

// free releases addr; an address the replay never saw allocated was
// allocated before the trace began, with the size the free reports.
func (b *builder) free(t uint64, l event.Layer, api event.API, dev int32, addr, size, stream uint64, frames []Frame) {
	k := rangeKey{l, dev, addr}
	if live, ok := b.live[k]; ok {
		size = live
	} else {
		allocAPI := event.APICudaMalloc
		switch api {
		case event.APIPyTorchFree:
			allocAPI = event.APIPyTorchMalloc
		case event.APICuMemUnmap:
			allocAPI = event.APICuMemMap
		}
		b.initial = append(b.initial, b.event(0, event.KindAlloc, l, allocAPI, dev, addr, size, stream, nil))
	}
	delete(b.live, k)
	b.events = append(b.events, b.event(t, event.KindFree, l, api, dev, addr, size, stream, frames))
}

func (b *builder) apply(o op) {
	te := o.te
	switch te.Action {
	case ActionSegmentAlloc:
		b.alloc(o.time, event.LayerSegment, event.APICudaMalloc, o.device, te.Addr, te.Size, te.Stream, te.Frames)
	case ActionSegmentFree:
		b.free(o.time, event.LayerSegment, event.APICudaFree, o.device, te.Addr, te.Size, te.Stream, te.Frames)
	case ActionSegmentMap:
		b.alloc(o.time, event.LayerSegment, event.APICuMemMap, o.device, te.Addr, te.Size, te.Stream, te.Frames)
	case ActionSegmentUnmap:
		b.unmap(o, te)
	case ActionAlloc:
		b.alloc(o.time, event.LayerBlock, event.APIPyTorchMalloc, o.device, te.Addr, te.Size, te.Stream, te.Frames)
	case ActionFreeCompleted, "free": // "free": the pair's name in some PyTorch 2.0 builds
		b.free(o.time, event.LayerBlock, event.APIPyTorchFree, o.device, te.Addr, te.Size, te.Stream, te.Frames)
	case ActionOOM:
		ev := b.event(o.time, event.KindAlloc, event.LayerBlock, event.APIPyTorchMalloc, o.device, 0, te.Size, te.Stream, te.Frames)
		ev.Ret = retOOM
		b.events = append(b.events, ev)
	}
}

// unmap frees every mapped range that [addr, addr+size) touches, and maps
// again the parts of them outside it: expandable segments unmap in pages
// that need not match the maps.
func (b *builder) unmap(o op, te *TraceEntry) {
	lo, hi := te.Addr, te.Addr+te.Size
	var hit []rangeKey
	for k, n := range b.live {
		if k.layer == event.LayerSegment && k.device == o.device && k.addr < hi && k.addr+n > lo {
			hit = append(hit, k)
		}
	}
	if len(hit) == 0 {
		b.free(o.time, event.LayerSegment, event.APICuMemUnmap, o.device, te.Addr, te.Size, te.Stream, te.Frames)
		return
	}
	slices.SortFunc(hit, func(x, y rangeKey) int { return cmp.Compare(x.addr, y.addr) })
	for _, k := range hit {
		n := b.live[k]
		b.free(o.time, event.LayerSegment, event.APICuMemUnmap, o.device, k.addr, n, te.Stream, te.Frames)
		if k.addr < lo {
			b.alloc(o.time, event.LayerSegment, event.APICuMemMap, o.device, k.addr, lo-k.addr, te.Stream, nil)
		}
		if k.addr+n > hi {
			b.alloc(o.time, event.LayerSegment, event.APICuMemMap, o.device, hi, k.addr+n-hi, te.Stream, nil)
		}
	}
}

// uncovered returns the parts of [addr, addr+size) on dev that no live
// segment-layer range covers, as (address, size) pairs.
func (b *builder) uncovered(dev int32, addr, size uint64) [][2]uint64 {
	var in [][2]uint64
	for k, n := range b.live {
		if k.layer == event.LayerSegment && k.device == dev && k.addr < addr+size && k.addr+n > addr {
			in = append(in, [2]uint64{k.addr, k.addr + n})
		}
	}
	slices.SortFunc(in, func(x, y [2]uint64) int { return cmp.Compare(x[0], y[0]) })
	var gaps [][2]uint64
	at := addr
	for _, r := range in {
		if r[0] > at {
			gaps = append(gaps, [2]uint64{at, r[0] - at})
		}
		at = max(at, r[1])
	}
	if at < addr+size {
		gaps = append(gaps, [2]uint64{at, addr + size - at})
	}
	return gaps
}
