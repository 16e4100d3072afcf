package recorder

// The flight recorder (run and attach --max-trace SIZE): a recording that
// runs for days keeps the last stretch of its events within SIZE on disk,
// and summarises the rest exactly enough for a report at any moment.
//
// How: the trace is a ring of segment files, DIR/trace-NNNNNN.vpt, each a
// whole trace of its own about SIZE/flightSegments long. When the current
// segment is full, the next one starts with the header, the descriptive
// records seen so far that describe processes and devices (libraries,
// processes, devices, interpreters, the NVML status and the last lost
// count), the pytest test each process runs then (the first and the
// latest TestPhase of it: report/pytests reads the segment's allocations
// as that test's, and the restored ones made since it began), the stacks the checkpoint refers to (those of the allocations
// live and live at its peaks) with their mappings, a Checkpoint record
// summarising every event before it, and the events of the allocations
// still live then, flagged FlagRestored (checkpoint.Tracker follows them). Then
// the oldest segments are deleted while the ones kept exceed SIZE; the
// newest always stays. A reader (Analyze, moments) starts at the oldest
// segment kept, restores from its checkpoint, and reads the later
// segments' own records only (segments.go).
//
// Identity: each segment's header is followed by an event.Identity, the
// recording's random ID, the segment's number and the record count and
// chained checksum the previous segment ended with, so that a reader
// refuses a gap, a cut, a foreign or a repeated segment (ErrSegments)
// instead of reading wrong figures from it.
//
// Stacks: an event whose stack its segment has not described yet is
// preceded by that stack (and its mappings) again (describe). A segment's
// top grows with what is live and at the peaks, not with every stack ever
// seen, and each segment still describes every stack its events use.
//
// Memory: the tracker holds one event per live allocation, the live sets
// by class and the timelines; the recorder the descriptive records (every
// stack and mapping seen among them); never the events themselves.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"

	"github.com/vramprof/vramprof/analysis/checkpoint"
	"github.com/vramprof/vramprof/probes/event"
)

// flightSegments is how many segments SIZE is cut into. With n segments
// the window kept is at least (n-1)/n of SIZE, less the checkpoints; more
// segments keep more of it, at the cost of a checkpoint (every live
// allocation again) per segment.
const flightSegments = 4

// minFlightSegment keeps a segment from being mostly checkpoint: below
// it, a recording with many live allocations would rotate on every event.
const minFlightSegment = MinMaxTrace / flightSegments

// flight is a recording's flight recorder; its fields are guarded by
// Recorder.mu.
type flight struct {
	max     uint64 // --max-trace
	segSize uint64 // a segment's budget
	header  event.Header
	// id is the recording's identity, the same in each segment's
	// event.Identity: a reader refuses a segment of another recording.
	id string
	// seg is the current segment's number; kept the segments on disk, in
	// order, the current one last.
	seg  uint64
	kept []string
	// sizes are the kept segments' lengths, the current one's when it
	// began (its checkpoint).
	sizes []uint64
	// start is the current segment's length when its checkpoint was
	// written: its events' budget begins there.
	start   uint64
	written *countWriter
	tracker *checkpoint.Tracker
	// desc are the descriptive records but stacks and mappings, in
	// stream order, lost the last lost count: written again at the top of
	// each segment.
	desc []event.Record
	lost *event.Lost
	// phases are, by PID, the pytest test the process runs now: its
	// first TestPhase (when it began) and its latest, written again at
	// the top of each segment. A process runs no test without an entry.
	phases map[uint32][]event.TestPhase
	// stacks and mappings are every one seen; sent and sentMaps are those
	// the current segment holds.
	stacks   map[event.StackID]*event.Stack
	mappings map[event.MappingID]*event.Mapping
	sent     map[event.StackID]struct{}
	sentMaps map[event.MappingID]struct{}
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n uint64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

// newFlight prepares a flight recorder of size bytes (--max-trace).
func newFlight(size uint64) (*flight, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("recording identity: %w", err)
	}
	return &flight{max: size, id: hex.EncodeToString(id[:]), segSize: max(size/flightSegments, minFlightSegment), tracker: checkpoint.NewTracker(),
		stacks: make(map[event.StackID]*event.Stack), mappings: make(map[event.MappingID]*event.Mapping),
		sent: make(map[event.StackID]struct{}), sentMaps: make(map[event.MappingID]struct{}),
		phases: make(map[uint32][]event.TestPhase)}, nil
}

// createSegment creates segment n in d, as createTrace does the trace.
func (d *Dir) createSegment(n uint64) (*os.File, error) {
	f, err := d.root.OpenFile(segmentName(n), os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrOutputDir, d.path, err)
	}
	return f, nil
}

// startFlight opens the first segment. r.mu is held or not yet shared.
func (r *Recorder) startFlight(h *event.Header) error {
	fl := r.flight
	fl.header = *h
	fl.tracker.SetStart(h.Start)
	fl.seg = 1
	f, err := r.out.createSegment(fl.seg)
	if err != nil {
		return err
	}
	r.file = f
	fl.kept = []string{segmentName(fl.seg)}
	fl.sizes = []uint64{0}
	fl.written = &countWriter{w: f}
	r.w, err = event.NewSegmentWriter(fl.written, h, &event.Identity{Recording: fl.id, Segment: fl.seg})
	if err != nil {
		return fmt.Errorf("write trace header: %w", err)
	}
	return nil
}

// observe notes rec, about to be written, in the flight recorder's state.
func (fl *flight) observe(rec event.Record) {
	switch x := rec.(type) {
	case *event.Event:
		fl.tracker.Observe(x)
	case *event.Lost:
		l := *x
		fl.lost = &l
	case *event.Process:
		fl.tracker.Process(x)
		fl.desc = append(fl.desc, cloneRecord(rec))
	case *event.Stack:
		fl.stacks[x.ID] = cloneRecord(rec).(*event.Stack)
	case *event.Mapping:
		fl.mappings[x.ID] = cloneRecord(rec).(*event.Mapping)
	case *event.Library, *event.DeviceInfo, *event.Interpreter, *event.NVMLStatus:
		fl.desc = append(fl.desc, cloneRecord(rec))
	case *event.TestPhase:
		fl.phase(x)
	}
}

// phase follows the pytest test a process runs: a phase of another test
// (or the first) starts its entry, one of the same test replaces the
// latest, and the end of its teardown (NodeID "") removes it.
func (fl *flight) phase(p *event.TestPhase) {
	cur := fl.phases[p.PID]
	switch {
	case p.NodeID == "":
		delete(fl.phases, p.PID)
	case len(cur) == 0 || cur[0].NodeID != p.NodeID:
		fl.phases[p.PID] = []event.TestPhase{*p}
	case len(cur) == 1:
		fl.phases[p.PID] = append(cur, *p)
	default:
		cur[1] = *p
	}
}

// writePhases writes the test each process runs, by PID, in the current
// segment: the first phase of it, then the latest.
func (fl *flight) writePhases(w *event.Writer) error {
	pids := make([]uint32, 0, len(fl.phases))
	for pid := range fl.phases {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	for _, pid := range pids {
		for i := range fl.phases[pid] {
			if err := w.Write(&fl.phases[pid][i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// describe writes what the current segment must hold before rec: the
// stack of an event, the mappings of a stack, when the segment has not
// written them yet. It notes rec itself as written when it is one.
func (fl *flight) describe(w *event.Writer, rec event.Record) error {
	switch x := rec.(type) {
	case *event.Event:
		if x.Stack == 0 {
			return nil
		}
		if _, ok := fl.sent[x.Stack]; ok {
			return nil
		}
		st := fl.stacks[x.Stack]
		if st == nil {
			return nil // described later, or never
		}
		return fl.sendStack(w, st)
	case *event.Stack:
		fl.sent[x.ID] = struct{}{}
		return fl.sendMappings(w, x)
	case *event.Mapping:
		fl.sentMaps[x.ID] = struct{}{}
	}
	return nil
}

// sendStack writes st, after its mappings, in the current segment.
func (fl *flight) sendStack(w *event.Writer, st *event.Stack) error {
	if err := fl.sendMappings(w, st); err != nil {
		return err
	}
	fl.sent[st.ID] = struct{}{}
	return w.Write(st)
}

// sendMappings writes the mappings st's frames lie in that the current
// segment has not written.
func (fl *flight) sendMappings(w *event.Writer, st *event.Stack) error {
	for _, f := range st.Frames {
		if f.Mapping == 0 {
			continue
		}
		if _, ok := fl.sentMaps[f.Mapping]; ok {
			continue
		}
		m := fl.mappings[f.Mapping]
		if m == nil {
			continue
		}
		fl.sentMaps[f.Mapping] = struct{}{}
		if err := w.Write(m); err != nil {
			return err
		}
	}
	return nil
}

// checkpointStacks are the stacks a checkpoint and its restored events
// refer to, in ID order.
func checkpointStacks(c *event.Checkpoint, live []event.Event) []event.StackID {
	ids := make(map[event.StackID]struct{})
	for i := range live {
		ids[live[i].Stack] = struct{}{}
	}
	for i := range c.Peaks {
		p := &c.Peaks[i]
		ids[p.At.Stack] = struct{}{}
		for _, l := range p.Live {
			ids[l.Stack] = struct{}{}
		}
	}
	delete(ids, 0)
	out := make([]event.StackID, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// cloneRecord copies a record the caller may reuse. Only events are reused
// by the probes today; the others are copied shallowly, which is enough
// as long as their slices are not written to after they are recorded.
func cloneRecord(rec event.Record) event.Record {
	switch x := rec.(type) {
	case *event.Stack:
		c := *x
		c.Frames = slices.Clone(x.Frames)
		return &c
	case *event.Mapping:
		c := *x
		return &c
	case *event.Library:
		c := *x
		return &c
	case *event.Process:
		c := *x
		return &c
	case *event.DeviceInfo:
		c := *x
		return &c
	case *event.Interpreter:
		c := *x
		return &c
	case *event.NVMLStatus:
		c := *x
		return &c
	}
	return rec
}

// flightFull reports whether the current segment is full: at its budget,
// with at least half of it events. A checkpoint bigger than the budget
// (more live allocations than fit) makes longer segments rather than a
// rotation at every event.
func (r *Recorder) flightFull() bool {
	fl := r.flight
	n := fl.written.n + uint64(r.w.Buffered())
	return n >= fl.segSize && n-fl.start >= fl.segSize/2
}

// rotate ends the current segment and starts the next one with a
// checkpoint, then deletes the segments beyond the ring. r.mu is held: the
// trace is at a record boundary.
func (r *Recorder) rotate() error {
	fl := r.flight
	if err := r.w.Close(); err != nil {
		return err
	}
	// What the next segment says this one ended with.
	id := event.Identity{Recording: fl.id, Segment: fl.seg + 1, PrevFrames: r.w.Frames(), PrevSum: r.w.Sum()}
	prev := fl.written.n
	if err := r.file.Close(); err != nil {
		return fmt.Errorf("close trace segment: %w", err)
	}
	fl.seg++
	f, err := r.out.createSegment(fl.seg)
	if err != nil {
		return err
	}
	r.file = f
	fl.written = &countWriter{w: f}
	if r.w, err = event.NewSegmentWriter(fl.written, &fl.header, &id); err != nil {
		return err
	}
	for _, rec := range fl.desc {
		if err := r.w.Write(rec); err != nil {
			return err
		}
	}
	if fl.lost != nil {
		if err := r.w.Write(fl.lost); err != nil {
			return err
		}
	}
	if err := fl.writePhases(r.w); err != nil {
		return err
	}
	c, live := fl.tracker.Checkpoint(fl.seg)
	clear(fl.sent)
	clear(fl.sentMaps)
	for _, id := range checkpointStacks(c, live) {
		if st := fl.stacks[id]; st != nil {
			if err := fl.sendStack(r.w, st); err != nil {
				return err
			}
		}
	}
	if err := r.w.Write(c); err != nil {
		return err
	}
	for i := range live {
		if err := r.w.Write(&live[i]); err != nil {
			return err
		}
	}
	if err := r.w.Flush(); err != nil {
		return err
	}
	fl.start = fl.written.n
	fl.sizes[len(fl.sizes)-1] = prev
	fl.kept = append(fl.kept, segmentName(fl.seg))
	fl.sizes = append(fl.sizes, fl.start)
	// The oldest segments go while the ones kept exceed the budget; the
	// new one, which restores everything, always stays. Disk stays within
	// the budget and the segment being written.
	for total := sum(fl.sizes); len(fl.kept) > 1 && total > fl.max; {
		if err := r.out.root.Remove(fl.kept[0]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove trace segment: %w", err)
		}
		total -= fl.sizes[0]
		fl.kept, fl.sizes = fl.kept[1:], fl.sizes[1:]
	}
	return nil
}

// openSegments opens the segments kept, oldest first, for a moment report:
// open, a segment deleted meanwhile stays readable. r.mu is held.
func (r *Recorder) openSegments() ([]*os.File, error) {
	var files []*os.File
	for _, name := range r.flight.kept {
		f, err := r.out.root.Open(name)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("open trace segment: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

func sum(xs []uint64) uint64 {
	var n uint64
	for _, x := range xs {
		n += x
	}
	return n
}
