package report

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/units"
)

// The Perfetto trace is the Chrome JSON Trace Event Format, which the
// Perfetto UI (ui.perfetto.dev) and chrome://tracing open and PyTorch's
// profiler exports: {"traceEvents": [...], "displayTimeUnit": "ms",
// "metadata": {...}}. Its layout:
//
//   - one process per traced PID ("M" process_name: its command line), its
//     events on the thread whose tid is the PID;
//   - counters ("C"), per process and device: "GPU <d>" with series "live"
//     (device memory at the segment layer: what the report's live and peak
//     bytes count; with a caching allocator, what it reserved) and
//     "blocks" (the caching allocator's blocks: what it handed out), and
//     "pinned host" with series "live". A point at every allocation and
//     free, with the exact byte count after it, and a last point at the
//     end of the run; never coalesced, so a counter's maximum is the peak
//     and its last value the bytes live at the end;
//   - allocation lifetimes as nestable async slices ("b" and "e", cat
//     "alloc", id2 {"local": address}), named "<layer> <size> at <site>":
//     Perfetto gives each name of a process its own track and lays
//     overlapping slices of one name out in lanes, so allocations of one
//     size from one site share a track whatever their overlaps; complete
//     events ("X") would have to nest on a thread track, which lifetimes
//     do not. Args: bytes (exact), address, device, layer, space, api,
//     live_at_peak and the stack's frames, leaf first. An allocation still
//     live at the end ends at the run's end with live_at_end set;
//   - out-of-memory failures and findings as process instants ("i", scope
//     "p"; global, "g", for a finding of no one process), their words in
//     args; a global instant at the start says how many events were lost
//     (always, even 0) and the metadata carries the same counts.
//
// Times are microseconds with nanosecond decimals: since the Unix epoch
// when the recording has its wall-clock start (as PyTorch's profiler
// traces are), so the two can be read against each other; else since the
// run's start.
// Events that reached the recorder late (Result.LateEvents) are counted
// where they arrived: a counter point never goes back in time on its
// track.
//
// Size: counters are one event (about 100 bytes) per allocation or free.
// Slices are bounded: per process, the DefaultPerfettoSlices largest of the
// allocations live at its peak, and the DefaultPerfettoSlices largest of
// the others; the metadata counts those left out. Out-of-memory instants
// stop at maxOOMInstants, counted likewise. The writer streams: counters
// go out as the analysis counts them; it keeps the live allocations (as
// the analysis does) and the bounded slice sets.

// DefaultPerfettoSlices is PerfettoOptions.MaxSlices' default.
const DefaultPerfettoSlices = 4096

// maxOOMInstants is the most out-of-memory instants a trace holds: a
// retry loop can fail millions of times.
const maxOOMInstants = 4096

// PerfettoOptions tunes a Perfetto trace.
type PerfettoOptions struct {
	// MaxSlices is the most allocation slices per process in each of its
	// two sets, live at the peak and the others (largest first; default
	// DefaultPerfettoSlices).
	MaxSlices int
}

// Perfetto writes a recording as a Perfetto (Chrome JSON) trace while it
// is analysed: give Watch to the analysis (analysis.Options.Watch), every
// record to Record before the analysis sees it, then the Result to
// Finish. A Perfetto is not safe for concurrent use.
type Perfetto struct {
	w    *bufio.Writer
	err  error
	opts PerfettoOptions

	// start is the time origin (the Header's Start, else the first
	// event's) and wall the Unix ns there (0: unknown).
	start     uint64
	wall      uint64
	haveStart bool

	// events counts the trace events written; seq the changes seen.
	events uint64
	seq    uint64
	buf    []byte

	tracks map[counterKey]*counterTrack
	live   map[sliceKey]allocSlice
	procs  map[uint32]*perfettoProc

	ooms        []oomInstant
	oomsOmitted uint64
}

// counterKey is a counter series: a process's device (or pinned host
// memory) at one layer.
type counterKey struct {
	pid    uint32
	device int32
	host   bool
	layer  event.Layer
}

// counterTrack is a series' last point, time (ns from start) and value,
// and the text of its events around their time (head, ts, tail, value).
type counterTrack struct {
	last  uint64
	value uint64
	head  []byte
	tail  []byte
}

// sliceKey is a live allocation: the analysis's key space and address.
type sliceKey struct {
	inst  uint32
	layer event.Layer
	space analysis.MemorySpace
	addr  uint64
}

// allocSlice is one allocation's lifetime. seq is the change that made it
// live: allocations order by it, and the peak's change tells which were
// live then.
type allocSlice struct {
	seq        uint64
	born, end  uint64
	addr, size uint64
	pid, inst  uint32
	device     int32
	layer      event.Layer
	space      analysis.MemorySpace
	api        event.API
	stack      event.StackID

	atPeak, liveAtEnd, replaced, restored bool
}

// perfettoProc is one process instance's peak (device memory, segment
// layer, as Process.Totals.PeakBytes) and its slice sets.
type perfettoProc struct {
	peak, peakSeq uint64
	havePeak      bool
	atPeak        sliceHeap // live at the current peak, largest kept
	others        sliceHeap // the largest of the rest
	omitted       uint64
}

// oomInstant is a failed allocation for want of memory, or a caching
// allocator's own report of one (report set).
type oomInstant struct {
	e      event.Event
	report bool
}

// NewPerfetto returns a Perfetto writing to w.
func NewPerfetto(w io.Writer, opts PerfettoOptions) *Perfetto {
	if opts.MaxSlices <= 0 {
		opts.MaxSlices = DefaultPerfettoSlices
	}
	p := &Perfetto{
		w:      bufio.NewWriterSize(w, 1<<16),
		opts:   opts,
		tracks: make(map[counterKey]*counterTrack),
		live:   make(map[sliceKey]allocSlice),
		procs:  make(map[uint32]*perfettoProc),
	}
	p.write(`{"traceEvents":[`)
	return p
}

func (p *Perfetto) write(s string) {
	if p.err == nil {
		_, p.err = p.w.WriteString(s)
	}
}

// event writes one trace event (b holds it, without separator).
func (p *Perfetto) event(b []byte) {
	if p.err != nil {
		return
	}
	if p.events > 0 {
		p.err = p.w.WriteByte(',')
	}
	if p.err == nil {
		p.err = p.w.WriteByte('\n')
	}
	if p.err == nil {
		_, p.err = p.w.Write(b)
	}
	p.events++
}

// Record sees one record of the stream, before the analysis does: the
// Header's time origin, and the failed allocations that ran out of memory.
func (p *Perfetto) Record(rec event.Record) error {
	switch r := rec.(type) {
	case *event.Header:
		if r != nil && !p.haveStart {
			p.start, p.haveStart = r.Start, true
			if r.WallTime > 0 {
				p.wall = uint64(r.WallTime)
			}
		}
	case *event.Event:
		if r == nil {
			return nil
		}
		if !p.haveStart {
			p.start, p.haveStart = r.Time, true
		}
		oom := r.Kind == event.KindOOMReport ||
			r.Ret != 0 && analysis.IsOutOfMemory(r.Ret) && r.Flags&event.FlagNested == 0 &&
				(r.Kind == event.KindAlloc || r.Kind == event.KindHostAlloc || r.Kind == event.KindCreate)
		if oom {
			if len(p.ooms) >= maxOOMInstants {
				p.oomsOmitted++
				return nil
			}
			p.ooms = append(p.ooms, oomInstant{e: *r, report: r.Kind == event.KindOOMReport})
		}
	}
	return nil
}

// Watch is the analysis's watcher (analysis.Options.Watch): it writes the
// counter point of the change and keeps the allocation's slice.
func (p *Perfetto) Watch(c *analysis.Change) {
	p.seq++
	if !p.haveStart {
		p.start, p.haveStart = c.Time, true
	}
	k := counterKey{pid: c.PID, device: c.Device, host: c.Space == analysis.SpaceHost, layer: c.Layer}
	if k.host {
		k.device = event.DeviceUnknown
	}
	p.counter(k, c.Time, c.DeviceLive)

	pp := p.procs[c.Instance]
	if pp == nil {
		pp = &perfettoProc{}
		p.procs[c.Instance] = pp
	}
	sk := sliceKey{inst: c.Instance, layer: c.Layer, space: c.Space, addr: c.Addr}
	if c.Alloc {
		p.live[sk] = allocSlice{seq: p.seq, born: c.Born, addr: c.Addr, size: c.Size, pid: c.PID, inst: c.Instance,
			device: c.Device, layer: c.Layer, space: c.Space, api: c.API, stack: c.Stack, restored: c.Restored}
		if c.Layer == event.LayerSegment && c.Space != analysis.SpaceHost && c.Live > pp.peak {
			// A new peak (the first time a value is reached counts, as the
			// analysis's): those live at the last one were not all live
			// at this one; the ones still live are in p.live.
			pp.peak, pp.peakSeq, pp.havePeak = c.Live, p.seq, true
			for _, s := range pp.atPeak {
				s.atPeak = false
				pp.keepOther(s, p.opts.MaxSlices)
			}
			pp.atPeak = pp.atPeak[:0]
		}
		return
	}
	s, ok := p.live[sk]
	if !ok {
		return // not reached: the analysis lets go only what it made live
	}
	delete(p.live, sk)
	s.end, s.replaced = c.Time, c.Replaced
	pp.keep(s, p.opts.MaxSlices)
}

// keep files a finished allocation in the set it belongs to.
func (pp *perfettoProc) keep(s allocSlice, limit int) {
	if pp.havePeak && s.seq <= pp.peakSeq && s.space != analysis.SpaceHost {
		// Live when the peak was reached, and freed after (or live at the
		// end).
		s.atPeak = true
		if out, ok := pp.atPeak.keep(s, limit); ok {
			pp.keepOther(out, limit) // still live at the peak: says so
		}
		return
	}
	pp.keepOther(s, limit)
}

func (pp *perfettoProc) keepOther(s allocSlice, limit int) {
	if _, ok := pp.others.keep(s, limit); ok {
		pp.omitted++
	}
}

// counter writes a counter point of series k at time t (ns, the trace's
// clock), never before the series' last point.
func (p *Perfetto) counter(k counterKey, t, v uint64) {
	tr := p.tracks[k]
	rel := p.rel(t)
	if tr == nil {
		tr = &counterTrack{}
		pid := strconv.FormatUint(uint64(k.pid), 10)
		tr.head = []byte(`{"ph":"C","pid":` + pid + `,"tid":` + pid + `,"ts":`)
		tr.tail = []byte(`,"name":"` + counterName(k) + `","args":{"` + seriesName(k) + `":`)
		p.tracks[k] = tr
	}
	rel = max(rel, tr.last)
	tr.last, tr.value = rel, v
	b := append(p.buf[:0], tr.head...)
	b = p.appendTS(b, rel)
	b = append(b, tr.tail...)
	b = strconv.AppendUint(b, v, 10)
	b = append(b, "}}"...)
	p.buf = b
	p.event(b)
}

// counterName is a series' counter: "GPU 0", "GPU unknown", "pinned host".
// Perfetto names the track "<counter> <series>".
func counterName(k counterKey) string {
	if k.host {
		return "pinned host"
	}
	return "GPU " + analysis.DeviceName(k.device)
}

// seriesName is "live" at the segment layer, "blocks" at the block layer.
func seriesName(k counterKey) string {
	if k.layer == event.LayerBlock {
		return "blocks"
	}
	return "live"
}

// rel is t in ns from the trace's start (0 before it).
func (p *Perfetto) rel(t uint64) uint64 {
	if t < p.start {
		return 0
	}
	return t - p.start
}

// appendTS appends a time (ns from the start) in microseconds with its
// nanoseconds as decimals, from the Unix epoch when the wall clock is
// known. Written as text, not through a float64: epoch nanoseconds need
// more digits than a float64 has.
func (p *Perfetto) appendTS(b []byte, rel uint64) []byte {
	ns := p.wall + rel
	b = strconv.AppendUint(b, ns/1000, 10)
	frac := ns % 1000
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	return b
}

// Finish writes what needs the whole run (the slices, the instants, the
// processes' names, the last counter points and the metadata) and
// flushes. It returns the first write error. Call it once, after the
// analysis's Finish.
func (p *Perfetto) Finish(res *analysis.Result) error {
	if res == nil {
		return ErrNilResult
	}
	if !p.haveStart {
		p.start, p.haveStart = res.Run.Start, true
	}
	end := p.rel(res.Run.End)

	// The last counter points: each series reaches the end of the run.
	keys := slices.SortedFunc(maps.Keys(p.tracks), func(a, b counterKey) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(counterName(a), counterName(b)), cmp.Compare(a.layer, b.layer))
	})
	for _, k := range keys {
		tr := p.tracks[k]
		if end > tr.last {
			p.counter(k, res.Run.End, tr.value)
		}
	}

	p.processNames(res)

	// What is still live ends with the run.
	for _, s := range p.live {
		s.end, s.liveAtEnd = res.Run.End, true
		p.procs[s.inst].keep(s, p.opts.MaxSlices)
	}
	var kept []allocSlice
	var written, omitted uint64
	for _, pp := range p.procs {
		kept = append(kept, pp.atPeak...)
		kept = append(kept, pp.others...)
		written += uint64(len(pp.atPeak) + len(pp.others))
		omitted += pp.omitted
	}
	slices.SortFunc(kept, func(a, b allocSlice) int { return cmp.Compare(a.seq, b.seq) })
	for i := range kept {
		p.slice(res, &kept[i])
	}

	for i := range p.ooms {
		p.oomInstant(res, &p.ooms[i])
	}
	for _, f := range wordFindings(res) {
		p.findingInstant(res, f)
	}
	p.runInstant(res)

	meta := perfettoMeta{
		Source:     "vramprof",
		Tool:       res.Run.Tool,
		Mode:       res.Run.Mode,
		Command:    nonNil(res.Run.Command),
		Clock:      "run",
		LostEvents: res.LostEvents,
		LateEvents: res.LateEvents,
		Slices: perfettoSliceMeta{Written: written, Omitted: omitted,
			Policy: "per process: the " + strconv.Itoa(p.opts.MaxSlices) + " largest allocations live at its peak and the " +
				strconv.Itoa(p.opts.MaxSlices) + " largest of the others"},
		OOMInstantsOmitted: p.oomsOmitted,
		StartNs:            p.start,
	}
	if p.wall != 0 {
		meta.Clock, meta.WallTimeNs = "unix", p.wall
	}
	if c := res.LostCauses; c.Known(res.LostEvents) {
		meta.LostCauses = &JSONLostCauses{RingFull: c.RingFull, Unpaired: c.Unpaired, Malformed: c.Malformed}
	}
	mb, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	p.write("\n],\n\"displayTimeUnit\":\"ms\",\n\"metadata\":")
	p.write(string(mb))
	p.write("}\n")
	if p.err == nil {
		p.err = p.w.Flush()
	}
	return p.err
}

// perfettoMeta is the trace's "metadata".
type perfettoMeta struct {
	Source  string   `json:"source"`
	Tool    string   `json:"tool"`
	Mode    string   `json:"mode"`
	Command []string `json:"command"`
	// Clock is "unix" when times count from the Unix epoch (WallTimeNs,
	// the run's start, is then set), "run" when from the run's start.
	Clock      string `json:"clock"`
	WallTimeNs uint64 `json:"wall_time_ns,omitempty"`
	// StartNs is the run's start on the trace's own clock.
	StartNs            uint64            `json:"start_ns"`
	LostEvents         uint64            `json:"lost_events"`
	LateEvents         uint64            `json:"late_events"`
	LostCauses         *JSONLostCauses   `json:"lost_causes,omitempty"`
	Slices             perfettoSliceMeta `json:"slices"`
	OOMInstantsOmitted uint64            `json:"oom_instants_omitted"`
}

type perfettoSliceMeta struct {
	Written uint64 `json:"written"`
	Omitted uint64 `json:"omitted"`
	Policy  string `json:"policy"`
}

// processNames writes each traced PID's name and its thread's (the last
// instance's command for a reused PID).
func (p *Perfetto) processNames(res *analysis.Result) {
	names := map[uint32]string{}
	var pids []uint32
	for i := range res.Processes {
		pr := &res.Processes[i]
		if _, ok := names[pr.PID]; !ok {
			pids = append(pids, pr.PID)
		}
		names[pr.PID] = commandLine(pr.Command, pr.Exe)
	}
	slices.Sort(pids)
	for _, pid := range pids {
		p.metaEvent(pid, "process_name", names[pid])
		p.metaEvent(pid, "thread_name", "GPU memory")
	}
}

// maxCommandLine caps a process name: Perfetto shows it as a track title.
const maxCommandLine = 200

func commandLine(cmd []string, exe string) string {
	s := strings.Join(cmd, " ")
	if s == "" {
		s = exe
	}
	if s == "" {
		s = "unknown"
	}
	if len(s) > maxCommandLine {
		s = s[:maxCommandLine] + "…"
	}
	return s
}

func (p *Perfetto) metaEvent(pid uint32, name, value string) {
	p.jsonEvent(map[string]any{"ph": "M", "pid": pid, "tid": pid, "name": name, "args": map[string]string{"name": value}})
}

// jsonEvent writes an event marshalled by encoding/json: the rarer ones
// (slices, instants, metadata), whose args vary.
func (p *Perfetto) jsonEvent(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		if p.err == nil {
			p.err = err
		}
		return
	}
	p.event(b)
}

// ts renders a time (ns, the trace's clock) as appendTS does, as a JSON
// number.
func (p *Perfetto) ts(t uint64) json.Number {
	return json.Number(p.appendTS(nil, p.rel(t)))
}

// sliceName is "<layer> <size> at <site>"; the layer word says the memory
// space for physical and pinned host memory.
func sliceName(res *analysis.Result, s *allocSlice) string {
	what := s.layer.String()
	switch s.space {
	case analysis.SpacePhysical:
		what = "physical"
	case analysis.SpaceHost:
		what = "pinned host"
	}
	return what + " " + units.Bytes(s.size) + " at " + res.Site(s.stack)
}

// sliceID is the async id: the address (a physical allocation's handle),
// with the instance after it for a reused PID's later instance.
func sliceID(s *allocSlice) map[string]string {
	id := "0x" + strconv.FormatUint(s.addr, 16)
	if s.inst != s.pid {
		id += "/" + strconv.FormatUint(uint64(s.inst), 10)
	}
	return map[string]string{"local": id}
}

func (p *Perfetto) slice(res *analysis.Result, s *allocSlice) {
	name := sliceName(res, s)
	id := sliceID(s)
	args := map[string]any{
		"bytes":        s.size,
		"address":      "0x" + strconv.FormatUint(s.addr, 16),
		"device":       analysis.DeviceName(s.device),
		"layer":        s.layer.String(),
		"space":        s.space.String(),
		"api":          s.api.String(),
		"live_at_peak": s.atPeak,
		"stack":        res.Lines(s.stack),
	}
	if s.restored {
		args["restored"] = true // live when a flight recorder's kept stretch began
	}
	p.jsonEvent(map[string]any{"ph": "b", "cat": "alloc", "name": name, "id2": id, "pid": s.pid, "tid": s.pid,
		"ts": p.ts(s.born), "args": args})
	endArgs := map[string]any{}
	switch {
	case s.liveAtEnd:
		endArgs["live_at_end"] = true
	case s.replaced:
		endArgs["free_missed"] = true // another allocation took its address
	}
	p.jsonEvent(map[string]any{"ph": "e", "cat": "alloc", "name": name, "id2": id, "pid": s.pid, "tid": s.pid,
		"ts": p.ts(s.end), "args": endArgs})
}

func (p *Perfetto) oomInstant(res *analysis.Result, o *oomInstant) {
	e := &o.e
	var name string
	args := map[string]any{
		"bytes":  e.Size,
		"device": analysis.DeviceName(e.Device),
		"layer":  e.Layer.String(),
		"api":    e.API.String(),
		"stack":  res.Lines(e.Stack),
	}
	if o.report {
		// The allocator's own report: Addr and Stream are what it held.
		name = "OOM: the caching allocator could not serve " + units.Bytes(e.Size)
		args["allocated_bytes"], args["reserved_bytes"] = e.Addr, e.Stream
	} else {
		name = "OOM: " + e.API.String() + " of " + units.Bytes(e.Size) + " failed at " + res.Site(e.Stack)
		args["error"] = analysis.ErrorName(e.API, e.Ret)
	}
	p.jsonEvent(map[string]any{"ph": "i", "s": "p", "cat": "oom", "name": name, "pid": e.PID, "tid": e.PID,
		"ts": p.ts(e.Time), "args": args})
}

func (p *Perfetto) findingInstant(res *analysis.Result, f wordedFinding) {
	stacks := make([]map[string]any, 0, len(f.Stacks))
	for _, s := range f.Stacks {
		stacks = append(stacks, map[string]any{"site": s.Site, "bytes": s.Bytes, "count": s.Count, "frames": nonNil(s.Frames)})
	}
	ev := map[string]any{"ph": "i", "s": "g", "cat": "finding", "name": f.Kind + ": " + f.Summary, "ts": p.ts(f.Time),
		"pid": 0, "tid": 0,
		"args": map[string]any{"kind": f.Kind, "severity": string(f.Severity), "summary": f.Summary, "bytes": f.Bytes,
			"remediation": nonNil(f.Remediation), "stacks": stacks}}
	if f.PID != 0 {
		ev["s"], ev["pid"], ev["tid"] = "p", f.PID, f.PID
	}
	p.jsonEvent(ev)
}

// runInstant is the global instant at the start that says how many events
// were lost: every output shows it, even 0.
func (p *Perfetto) runInstant(res *analysis.Result) {
	args := map[string]any{"lost_events": res.LostEvents, "late_events": res.LateEvents,
		"command": nonNil(res.Run.Command), "mode": res.Run.Mode, "ended": res.Run.Ended}
	if res.Run.EndReason != "" {
		args["end_reason"] = res.Run.EndReason
	}
	p.jsonEvent(map[string]any{"ph": "i", "s": "g", "cat": "vramprof", "pid": 0, "tid": 0,
		"name": "vramprof: " + strconv.FormatUint(res.LostEvents, 10) + " events lost",
		"ts":   p.ts(p.start), "args": args})
}

// sliceHeap keeps the largest slices: a min-heap by size (the later of
// two of one size first out, so the earlier stays).
type sliceHeap []allocSlice

func (h sliceHeap) Len() int           { return len(h) }
func (h sliceHeap) Less(i, j int) bool { return smaller(h[i], h[j]) }

// smaller orders the slices a sliceHeap keeps: by size, then the later
// first.
func smaller(a, b allocSlice) bool {
	if a.size != b.size {
		return a.size < b.size
	}
	return a.seq > b.seq
}
func (h sliceHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *sliceHeap) Push(x any)   { *h = append(*h, x.(allocSlice)) }
func (h *sliceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// keep adds s, and returns the smallest when more than limit are kept.
func (h *sliceHeap) keep(s allocSlice, limit int) (allocSlice, bool) {
	if len(*h) >= limit && !smaller((*h)[0], s) {
		return s, true // the smallest already: most are, in a long run
	}
	heap.Push(h, s)
	if h.Len() <= limit {
		return allocSlice{}, false
	}
	return heap.Pop(h).(allocSlice), true
}
