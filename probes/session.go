//go:build linux

package probes

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/probes/allocspec"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/symbolize"
)

// Sink receives the records of a session, in order. A session calls it from
// one goroutine at a time. event.Writer is a Sink.
type Sink interface {
	Write(rec event.Record) error
	Flush() error
}

// Options configures a Session.
type Options struct {
	// Sink receives every record after the header, which its owner writes
	// (event.NewWriter does). Required.
	Sink Sink
	// RingBytes is the ring buffer size, a power of two and a multiple of
	// the page size. Default 16 MiB: at ~200 bytes a record, about 80k
	// allocations of headroom while the reader is busy symbolizing.
	RingBytes int
	// Poll is how often the reader wakes when records trickle in below
	// the wakeup threshold, and so the worst-case delay of an event.
	// Default 50ms.
	Poll time.Duration
	// FlushEvery is how often the sink is flushed (a crash loses at most
	// this much). Default 1s.
	FlushEvery time.Duration
	// All makes every process on the host a target (attach --all): see
	// AttachAll.
	All bool
	// NoPool leaves framework allocators' USDT probes alone (--pool off):
	// no block layer. By default (--pool auto) they are probed wherever
	// their notes are found.
	NoPool bool
	// NoPython leaves Python frames out of stacks (--python off). By
	// default (--python auto) a CPython found in a target has its frames
	// read at every allocation.
	NoPython bool
	// PythonDepth is the most Python frames recorded per stack, at most
	// and by default DefaultPythonDepth.
	PythonDepth int
	// Allocators are allocator specs (block layer) beside the built-in
	// ones (allocspec.Builtin), from --allocators. NoPool turns both off.
	Allocators []allocspec.Allocator
	// Note receives one-line notes for the user: with All, a process left
	// alone because another session traces it (once per process). Called
	// from the goroutine running AttachAll or Run. nil drops them.
	Note func(msg string)
	// ReorderWindow is the longest events are buffered for a call in flight,
	// to be written in the order they took effect (see reorder.go): a
	// release that stays in flight longer is written where it arrives and
	// counted late (event.Lost.Late). Default DefaultReorderWindow.
	ReorderWindow time.Duration
}

// Stats are counters a live display may read while a session runs. Safe for
// concurrent use.
type Stats struct {
	Events  atomic.Uint64 // allocation and free records delivered
	Lost    atomic.Uint64 // records lost: ring buffer full, unpaired, undecodable
	Late    atomic.Uint64 // events that arrived too late to be written in effect order
	Targets atomic.Int64  // processes being traced
	// Semaphores counts USDT semaphores raised by vramprof after the
	// kernel left them below their sites' count (semaphore.go).
	Semaphores atomic.Uint64
}

// Session traces the CUDA allocation API in a set of processes. It wires
// the parts together: the loader owns the kernel resources (BPF objects,
// ring buffers, probes, tracepoints, guardian), the reader reads and counts
// records, the process table keeps the lifecycle of the targets, and the
// stack table symbolizes. Close releases them in reverse order. Its methods
// are not safe for concurrent use, except Stats. A Session must be Closed.
type Session struct {
	opts   Options
	loader *loader
	procs  *procTable
	stacks *stackTable
	rd     *reader
	// stops counts the stop records read, for the test hook dieAtStop.
	stops int
	// stopsOf counts them per traced process (Stops).
	stopsOf map[event.ProcessStops]uint64
	// heldForTest: the test hook holdAtStop has held its stop.
	heldForTest bool

	allocs   []allocspec.Allocator // built-in and user specs; none with NoPool
	notCUDA  map[fileKey]bool      // files scanned and found to hold nothing to probe
	lastLost uint64
	lastLate uint64
	order    *reorder // events wait here to go out in effect order
	// phases are test phases waiting for the events before them (bufferPhase).
	phases []*event.TestPhase
	// mark is the last effect-order watermark read from the threads map
	// (see reorder.go), applied once the ring buffer is next found empty
	// or the reader has reached markAt, whichever comes first; 0 when
	// none. noMark: the kernel cannot batch-read the map.
	mark        uint64
	markAt      uint64
	noMark      bool
	markKeys    []uint64
	markThreads []bpfThread
	stats       Stats
	closed      bool
	prefetch    pyPrefetch

	// loads: runtimes loaded after the session began (loads.go).
	loads loadState
	// watching: the file fault watch is attached (loaded.go) and the BPF
	// side is quiet: a target is stopped at its loader's rendezvous only
	// for a file not examined yet (preload.go).
	watching bool
	// watchedFrom is when AttachAll's watch on every process's mappings
	// began, in /proc/PID/stat's clock ticks since boot; 0 before. A
	// process that started in a later tick was traced from its start.
	watchedFrom uint64
}

// NewSession loads the BPF objects and opens the ring buffer. Nothing is
// probed until Launch or Attach names a process.
func NewSession(opts Options) (*Session, error) {
	if opts.Sink == nil {
		return nil, errors.New("new session: no sink")
	}
	if opts.RingBytes == 0 {
		opts.RingBytes = 16 << 20
	}
	if opts.Poll == 0 {
		opts.Poll = 50 * time.Millisecond
	}
	if opts.FlushEvery == 0 {
		opts.FlushEvery = time.Second
	}
	if opts.ReorderWindow <= 0 {
		opts.ReorderWindow = DefaultReorderWindow
	}
	l, err := newLoader(&opts)
	if err != nil {
		return nil, err
	}
	s := &Session{
		opts:    opts,
		loader:  l,
		stacks:  newStackTable(opts.Sink),
		rd:      newReader(l),
		notCUDA: make(map[fileKey]bool),
		order:   newReorder(uint64(opts.ReorderWindow), reorderLimit(opts.RingBytes)),
	}
	s.procs = newProcTable(kernelHost{&l.objs, l.epoch}, opts.All, opts.Note, &s.stats.Targets)
	if err := s.watchMappings(); err != nil {
		if opts.All {
			_ = l.close()
			return nil, err
		}
		// Without the watch, targets stop at every rendezvous: seen by
		// them, but nothing is missed.
	}
	s.startPrefetch()
	if !opts.NoPool {
		s.allocs = append(allocspec.Builtin(), opts.Allocators...)
	}
	return s, nil
}

// Stops returns how many times each traced process was stopped at a
// library load or exec (after its first exec, under Launch, which ptrace
// stops), by PID and start time, ordered by PID; processes never stopped
// are not listed.
func (s *Session) Stops() []event.ProcessStops {
	out := make([]event.ProcessStops, 0, len(s.stopsOf))
	for k, n := range s.stopsOf {
		k.Count = n
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b event.ProcessStops) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Start, b.Start))
	})
	return out
}

// Stats returns the session's live counters.
func (s *Session) Stats() *Stats { return &s.stats }

// Close removes every probe, resumes the targets the loader and exec probes
// stopped and the session has not resumed yet (and no other process: one
// the user stopped stays stopped), ends the guardian, closes the readers
// and unloads the BPF objects, in that order (loader.close), then releases
// the symbolizer and the targets' locks. It returns the first error. The
// markers of its deferred stops stay: the session that holds such a
// process resumes it (takeDeferred).
func (s *Session) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.loader.close()
	s.stacks.sym.Close()
	for _, p := range s.procs.procs {
		s.dropPython(p)
		p.lock.release()
	}
	return err
}

// track adds pid to the traced set: the BPF filter map, the Process record.
// The record describes the process as /proc shows it now, or as info says
// when given (a fork child is its parent's image until it execs: reading
// /proc later races with that exec, or with its exit). args, when not nil,
// is the command line a record of the process carried (REC_MAPPED's): the
// record's command when /proc shows none (it exits: its command line goes
// with its memory).
func (s *Session) track(pid uint32, info *event.Process, args []string) (*proc, error) {
	p, added, err := s.procs.add(pid, info != nil)
	if err != nil || !added {
		return p, err
	}
	if info == nil {
		info = procInfo(pid)
	}
	if len(info.Command) == 0 && len(args) > 0 {
		info.Command = args
	}
	if p.startTime == 0 {
		p.startTime = info.Start // gone already: as its record said (adoptGone)
	}
	info.PID, info.Time, info.Start = pid, MonotonicNow(), p.startTime
	info.FromStart = info.FromStart || s.watchedFrom != 0 && p.startTime > s.watchedFrom
	p.fromStart = info.FromStart
	if err := s.describe(p, info); err != nil {
		return nil, err
	}
	return p, nil
}

// describe writes the Process record of p and keeps it. Events of an
// earlier instance of its PID (an exec replaces the image; a PID is reused)
// still buffered for effect order go out first: they are that instance's.
func (s *Session) describe(p *proc, info *event.Process) error {
	buffered := s.order.flushPID(p.pid)
	for i := range buffered {
		if err := s.opts.Sink.Write(&buffered[i]); err != nil {
			return fmt.Errorf("write event of pid %d: %w", p.pid, err)
		}
	}
	p.info = *info
	if err := s.opts.Sink.Write(info); err != nil {
		return fmt.Errorf("write process record: %w", err)
	}
	return nil
}

// forgetExited drops the symbolizer's view of processes that exited before
// the ring buffer was last found empty (or, with dueOnly, before the mark
// the reader has now reached was taken): none of their records remain.
func (s *Session) forgetExited(dueOnly bool) {
	s.procs.reap(func(p *proc) {
		s.stacks.sym.Forget(p.pid)
		s.dropPython(p)
		s.stacks.forgetStacks(p.pid)
	}, dueOnly)
}

// scan examines the files p maps and probes the ones that define the CUDA
// allocation API or the loader rendezvous. It is called at start and after
// every change the loader announces. running: for a rendezvous that did
// not stop p (quiet), which runs on, maybe in the middle of mapping a file.
func (s *Session) scan(p *proc, running bool) error {
	// The BPF walker learns the interpreter before the first probe is
	// placed: a process attached to runs on while its files are probed,
	// and a call in between would have a stack without Python frames (a
	// launched one is stopped then, which hid this from run).
	if err := s.findPython(p); err != nil {
		return err
	}
	if err := s.probePytest(p); err != nil {
		return err
	}
	files, err := s.probeFiles(p.pid)
	if err != nil {
		return err
	}
	// The symbolizer learns the new maps now, while the process is alive
	// (stopped, when called for the loader): a short-lived process may be
	// gone before its stacks are read.
	if err := s.stacks.sym.Prepare(p.pid); err != nil {
		return fmt.Errorf("%w: %d: %w", ErrNoProcess, p.pid, err)
	}
	var maps []symbolize.MapEntry // read once, when a file has USDT semaphores
	for _, f := range files {
		if p.libraries[f.Key] {
			continue
		}
		if running && len(semaphoreSites(f)) > 0 {
			// Its semaphores written now can be mapped over by the
			// loader mapping f's data (three PyTorch processes in one
			// run: two saw no tensor). Never known (probeFiles), f stops
			// p at its loader's next rendezvous: raised there.
			continue
		}
		p.libraries[f.Key] = true
		if len(semaphoreSites(f)) > 0 {
			if maps == nil {
				if maps, err = symbolize.ReadMaps(int(p.pid)); err != nil {
					return fmt.Errorf("%w: %d: %w", ErrNoProcess, p.pid, err)
				}
			}
			n, err := raiseSemaphores(p.pid, f, maps)
			s.stats.Semaphores.Add(uint64(n))
			if err != nil {
				return err
			}
			if n > 0 && s.opts.All && s.opts.Note != nil {
				// Not stopped for a file probed already: it ran with the
				// notes silent until now (semaphore.go).
				s.opts.Note(fmt.Sprintf("pid %d mapped %s after it was probed and the kernel left its USDT semaphores at 0 "+
					"until now: tensors it made before were not seen (its device memory was)", p.pid, f.Path))
			}
		}
		if err := s.writeLibrary(p, f); err != nil {
			return err
		}
	}
	return nil
}

// writeLibrary writes the Library record of f, a probed file p maps (with
// its path as p sees it), unless f is the loader only.
func (s *Session) writeLibrary(p *proc, f *probedFile) error {
	if !f.library() {
		return nil // the loader: not a CUDA library
	}
	syms := f.cudaSymbols()
	p.cuda = p.cuda || len(syms) > 0
	if f.StrippedRuntime {
		p.stripped = append(p.stripped, f.Path)
	}
	lib := &event.Library{PID: p.pid, Path: f.Path, BuildID: f.BuildID, Symbols: syms, Skipped: f.Skipped,
		StrippedRuntime: f.StrippedRuntime}
	if err := s.opts.Sink.Write(lib); err != nil {
		return fmt.Errorf("write library record: %w", err)
	}
	return nil
}

// probeFiles probes every file pid maps that defines a traced function and
// is not probed yet, and returns all the probed files it maps (with their
// paths as pid sees them).
func (s *Session) probeFiles(pid uint32) ([]*probedFile, error) {
	maps, err := symbolize.ReadMaps(int(pid))
	if err != nil {
		// A process exiting as its maps are read: ESRCH rather than
		// ENOENT. attach --all and serve met it with short-lived processes.
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return nil, fmt.Errorf("%w: %d", ErrNoProcess, pid)
		}
		return nil, err
	}
	specs := append(append([]probeSpec{}, cudaProbes...), loaderProbe)
	// Every file is screened before any is attached: the first attach
	// waits for the BPF programs still being verified (lateLoad), which
	// the screening of hundreds of files overlaps.
	type mappedFile struct {
		c  candidate
		pf *probedFile
	}
	var found []mappedFile
	for _, c := range candidates(int(pid), maps) {
		if s.notCUDA[c.Key] {
			continue
		}
		pf := s.loader.att.files[c.Key]
		if pf == nil {
			pf, err = scanFile(c, specs, !s.opts.NoPool, s.allocs)
			if err != nil || pf == nil {
				// Nothing to probe there, or unreadable (then it cannot be
				// probed either): one file must not stop the others.
				s.notCUDA[c.Key] = true
				s.examined(c.Key, c.OpenPath, false)
				continue
			}
		}
		found = append(found, mappedFile{c, pf})
	}
	var out []*probedFile
	for _, f := range found {
		c, pf := f.c, f.pf
		if !s.loader.att.attached(c.Key) {
			if err := s.loader.att.attach(pf); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue // gone (the process exited): maybe next time
				}
				return nil, err
			}
			if len(semaphoreSites(pf)) == 0 {
				s.examined(c.Key, c.OpenPath, pf.library())
			}
			// Else never known: every process that maps it stops at its
			// loader's rendezvous and has its USDT semaphores raised
			// there, before it runs on (semaphore.go); without that stop
			// the kernel left them at 0 in every process but the first
			// (three PyTorch processes in one run: 404 of 1212 tensors).
		}
		mapped := *pf
		mapped.candidate = c // this process's path to it
		out = append(out, &mapped)
	}
	return out, nil
}

// tick does the periodic work: noticing exits, lost-record accounting,
// giving back the reorder buffer's memory it no longer needs.
func (s *Session) tick() error {
	s.procs.sweep()
	s.takeDeferred()
	s.order.trim()
	if err := s.resumeDeferred(); err != nil {
		return err
	}
	return s.writeLost(false)
}

// handle passes one decoded record on.
func (s *Session) handle(r *rawRecord) error {
	if _, ok := s.procs.held[r.ev.PID]; ok {
		s.heldRecord(r) // another session's (All): left alone (see tick)
		return nil
	}
	if s.opts.All && s.procs.procs[r.ev.PID] == nil && r.kind != recFork && r.kind != recExit && r.kind != recTestPhase {
		// A process not seen before: one that maps a probed copy of the
		// runtime already (its calls pass the filter), or one whose loader
		// just mapped something.
		if held, err := s.adoptLoaded(r); err != nil || held {
			return err
		}
	}
	switch {
	case r.kind == recLoader || r.kind == recExec:
		return s.loaderChanged(r)
	case r.kind == recFork:
		return s.forked(r)
	case r.kind == recMapped:
		return s.mappedFile(r)
	case r.kind == recTestPhase:
		tp, err := testPhase(r)
		switch {
		case err != nil:
			s.rd.countUnknown()
		case s.procs.procs[r.ev.PID] != nil:
			s.bufferPhase(tp)
		default:
			// Of a process not tracked (AttachAll: every process passes
			// the BPF filter, and the libc is shared): none of ours.
			return nil
		}
		return s.release(false)
	case r.kind == recExit:
		if p := s.procs.procs[r.ev.PID]; p != nil {
			s.procs.noteExit(p.pid, r.ev.Addr)
			s.procs.untrack(p)
		}
		return nil
	case r.ev.Kind == event.KindInvalid:
		s.rd.countUnknown()
		return nil
	}
	switch r.ev.Kind.DeviceRule() {
	case event.DeviceNone:
		r.ev.Device = event.DeviceUnknown
	case event.DeviceCaller:
		if r.ev.Device == event.DeviceUnknown && !r.deviceLost {
			if p := s.procs.procs[r.ev.PID]; p != nil && p.fromStart {
				r.ev.Device = 0 // CUDA's default
			}
		}
	}
	if len(r.stack) > 0 {
		id, err := s.stacks.intern(r.ev.PID, r.frames(), r.caller, r.flags&(recFlagPyTrunc|recFlagPyBroke), r.pyFrames(), s.pythonOf(r.ev.PID))
		if err != nil {
			return err
		}
		r.ev.Stack = id
	}
	s.stats.Events.Add(1)
	if s.order.add(&r.ev) {
		// Too late for effect order (see reorder.go): written where it
		// arrived, and counted.
		if err := s.opts.Sink.Write(&r.ev); err != nil {
			return fmt.Errorf("write event: %w", err)
		}
		return nil
	}
	return s.release(false)
}

// watermark reads the clock, then the entry time of every thread's
// outermost traced call in flight (thread.since), and returns the earliest
// of them: once the ring buffer has been emptied after this, every event
// that took effect before it has been read (see reorder.go). Calls in
// flight for longer than the reorder window are left to the window. 0 when
// the map cannot be read.
func (s *Session) watermark() uint64 {
	if s.noMark {
		return 0
	}
	t0 := MonotonicNow()
	horizon := t0 - min(t0, uint64(s.opts.ReorderWindow))
	if s.markKeys == nil {
		s.markKeys = make([]uint64, 256)
		s.markThreads = make([]bpfThread, 256)
	}
	mark := t0
	var cursor ebpf.MapBatchCursor
	for {
		n, err := s.loader.objs.Threads.BatchLookup(&cursor, s.markKeys, s.markThreads, nil)
		for _, th := range s.markThreads[:n] {
			if th.Since != 0 && th.Since >= horizon && th.Since < mark {
				mark = th.Since
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return mark
		}
		if err != nil {
			// No batch operations (kernels before 5.6): the window alone.
			s.noMark = true
			return 0
		}
	}
}

// takeMark reads the watermark and the ring buffer position the producer
// has reached, in that order: once the reader has read up to that
// position, every record already in the ring buffer when the threads map
// was read has been read, as when the ring is found empty (see
// reorder.go). A reader that is behind never finds the ring empty; the
// position lets the mark release events exactly then too, instead of the
// window or the reorder buffer's limit; and processes known to have exited
// now are forgotten then (forgetExited), not only when the ring is empty.
func (s *Session) takeMark() {
	s.procs.markDue()
	s.mark = s.watermark()
	s.markAt = s.rd.position()
}

// release writes the buffered events that are due, in effect order; all of
// them when all is true.
func (s *Session) release(all bool) error {
	for ev := s.order.pop(all); ev != nil; ev = s.order.pop(all) {
		if len(s.phases) > 0 {
			t := ev.Time
			if err := s.writePhases(func(p uint64) bool { return p <= t }); err != nil {
				return err
			}
		}
		if err := s.opts.Sink.Write(ev); err != nil {
			return fmt.Errorf("write event: %w", err)
		}
	}
	if len(s.phases) > 0 {
		return s.writePhases(func(t uint64) bool { return all || s.order.due(t) })
	}
	return nil
}

// loaderChanged rescans a process whose link map changed, then resumes it
// if the BPF side stopped it.
func (s *Session) loaderChanged(r *rawRecord) error {
	var held func()
	if r.flags&recFlagStopped != 0 {
		s.stops++
		if holdAtStop != "" && !s.heldForTest && holdsHere(s.stops, r.ev.PID) {
			s.heldForTest = true
			held = holdForTest(holdAtStop, r.ev.PID)
		}
		if s.stops == dieAtStop {
			// Test only: die as a crash would, the target stopped (the
			// record can be read before the signal has stopped it).
			for i := 0; i < 200 && procState(int(r.ev.PID)) != 'T'; i++ {
				time.Sleep(5 * time.Millisecond)
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	p := s.procs.procs[r.ev.PID]
	if p != nil && r.flags&recFlagStopped == 0 && r.kind == recLoader {
		p.rendezvousAt = MonotonicNow()
	}
	if p != nil && r.flags&recFlagStopped != 0 {
		if s.stopsOf == nil {
			s.stopsOf = make(map[event.ProcessStops]uint64)
		}
		s.stopsOf[event.ProcessStops{PID: p.pid, Start: p.startTime}]++
	}
	var err error
	if p != nil && !p.exited {
		if r.kind == recExec {
			// A new image (stopped before its first instruction): the
			// process is what it now runs.
			info := procInfo(p.pid)
			info.Time, info.Start = MonotonicNow(), p.startTime
			info.FromStart = p.fromStart // its new image too
			err = s.describe(p, info)
			s.dropPython(p) // the BPF side forgot it too
		}
		if err == nil {
			err = s.scan(p, s.watching && r.kind == recLoader && r.flags&recFlagStopped == 0)
		}
		if err == nil && r.flags&recFlagStopped != 0 && s.watching {
			s.knowData(p.pid) // else a fault on them would stop it again
			// What the files it maps now would load (their RUNPATHs: the
			// driver beside a runtime dlopen()ed by its path).
			s.preload(p, procEnviron(int(p.pid)))
		}
	}
	if r.flags&recFlagStopped != 0 && s.opts.All && heldNow(r.ev.PID) {
		// A single-process session holds the process that stopped (it
		// took it since this one adopted it, and sweep lets go of it at
		// the next tick; or the PID is a new process's, whose stop came
		// before the old one's exit was reaped) and stopped it at this
		// same rendezvous: that session resumes it once it has probed,
		// not this one before (see heldRecord).
		s.deferStop(r.ev.PID, r.ev.Addr)
	} else if r.flags&recFlagStopped != 0 {
		// Not a user's stop sent meanwhile (resume.go): that one is the
		// user's to end, and the stop is no longer ours.
		user, kerr := resume(int(r.ev.PID))
		if kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			err = errors.Join(err, fmt.Errorf("resume pid %d: %w", r.ev.PID, kerr))
		}
		if user != 0 && s.opts.Note != nil {
			s.opts.Note(fmt.Sprintf("pid %d was sent %v while stopped at a library load: left stopped", r.ev.PID, user))
		}
		s.resumed(r.ev.Addr)
	}
	if held != nil {
		held()
	}
	if errors.Is(err, ErrNoProcess) {
		return nil // it exited meanwhile: nothing left to probe
	}
	return err
}

// resumed removes the stop with sequence number seq from the stopped map,
// after its SIGCONT: deleting first would leave the process stopped for
// good if vramprof died between the two. A later stop of the same process
// (it ran on and stopped again at once, as at start-up, where the loader
// announces twice in a row) has an entry of its own, which stays. Keyed by
// the process, this delete once took that later entry away: a vramprof
// killed at the later stop then left the process stopped.
func (s *Session) resumed(seq uint64) {
	_ = s.loader.objs.Stopped.Delete(seq)
}

// dieAtStop is a test hook, from $VRAMPROF_TEST_DIE_AT_STOP: the session
// kills itself with SIGKILL when it reads its Nth stop record, before it
// resumes the process, so that tests can check that the guardian resumes
// it. 0 (unset) is off. Never set it outside tests.
var dieAtStop, _ = strconv.Atoi(os.Getenv("VRAMPROF_TEST_DIE_AT_STOP"))

// holdAtStop is a test hook, from $VRAMPROF_TEST_HOLD_AT_STOP (a
// directory): at its first stop record, the session waits for the process
// to be stopped, writes its PID to DIR/held, and reads DIR/release (a FIFO
// the test made) to its end before it goes on; once it has dealt with the
// stop (resumed the process, or not), it creates DIR/handled. Tests act on
// a process vramprof holds stopped meanwhile: stop it themselves, kill the
// guardian, kill vramprof. Empty (unset) is off. Never set it outside
// tests.
var holdAtStop = os.Getenv("VRAMPROF_TEST_HOLD_AT_STOP")

// holdAtMap is a test hook, from $VRAMPROF_TEST_HOLD_AT_MAP: with
// holdAtStop, the hold is at the first stop of a process that maps a file
// whose path holds this string (the stop where a library it names has
// just been mapped, before the session probes it), instead of the first
// stop. Never set it outside tests.
var holdAtMap = os.Getenv("VRAMPROF_TEST_HOLD_AT_MAP")

// holdsHere reports whether holdAtStop holds the nth stop, of pid.
func holdsHere(n int, pid uint32) bool {
	if holdAtMap == "" {
		return n == 1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	return err == nil && strings.Contains(string(b), holdAtMap)
}

// holdForTest is holdAtStop's hold; it returns what marks the stop
// handled. It writes held once the process has stopped (the record can be
// read before the signal has stopped it), or is gone: the wait has no cap
// of its own, the test's timeout bounds it.
func holdForTest(dir string, pid uint32) (handled func()) {
	for st := procState(int(pid)); st != 'T' && st != 0; st = procState(int(pid)) {
		time.Sleep(5 * time.Millisecond)
	}
	tmp := filepath.Join(dir, "held.tmp")
	if os.WriteFile(tmp, []byte(strconv.Itoa(int(pid))), 0o644) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, "held"))
	}
	if f, err := os.Open(filepath.Join(dir, "release")); err == nil {
		_, _ = io.Copy(io.Discard, f)
		_ = f.Close()
	}
	return func() { _ = os.WriteFile(filepath.Join(dir, "handled"), nil, 0o644) }
}

// AttachAll traces every process on the host that maps a CUDA library now,
// and every one that maps one later: the BPF filter passes all processes
// (Options.All), the loader probe announces new mappings in any process
// (without stopping it: stopping every process on the host at each dlopen
// is not ours to do, so a process that loads a copy of the runtime no
// process had mapped before can make calls before it is probed), and a
// process is tracked from its first record.
func (s *Session) AttachAll() error {
	if !s.opts.All {
		return errors.New("attach all: the session was not created with Options.All")
	}
	// From now on a process that starts is seen from its start: the
	// probes on the files already known fire in it, and the watch
	// announces the others before their first call (loaded.go). Its start
	// tick is later than this one.
	s.watchedFrom = bootTicks()
	if err := s.loader.att.widen(); err != nil {
		return fmt.Errorf("attach all: %w", err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("attach all: %w", err)
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if err := s.adopt(uint32(pid), nil); err != nil {
			return err
		}
	}
	return nil
}

// adopt probes what pid maps and tracks it if it maps a CUDA library
// (Options.All). Processes that vanish or cannot be read are skipped; one
// that cannot be probed for another reason (a file it maps deleted since,
// an attach the kernel refuses) is left alone with a note: one process must
// not end a session that traces every process. args: see track.
func (s *Session) adopt(pid uint32, args []string) error {
	files, err := s.probeFiles(pid)
	if err != nil {
		if errors.Is(err, ErrNoProcess) || isPermission(err) {
			return nil
		}
		s.procs.giveUp(pid, err)
		return nil
	}
	for _, f := range files {
		if len(f.cudaSymbols()) > 0 {
			p, err := s.track(pid, nil, args)
			var held *TracedError
			if errors.As(err, &held) {
				s.procs.hold(pid, held)
				return nil
			}
			if err != nil {
				if !errors.Is(err, ErrNoProcess) {
					s.procs.giveUp(pid, err)
				}
				return nil
			}
			if err := s.scan(p, false); err != nil {
				s.procs.untrack(p)
				if !errors.Is(err, ErrNoProcess) {
					s.procs.giveUp(pid, err)
				}
			}
			return nil
		}
	}
	return nil
}

// forked starts tracking a target's child (the BPF side has already added it
// to the targets map, so none of its calls were missed).
func (s *Session) forked(r *rawRecord) error {
	child, parent := r.ev.PID, uint32(r.ev.Addr)
	if old := s.procs.procs[child]; old != nil {
		// The PID belonged to a process whose exit was not seen (its
		// records are all before this one): this is another process.
		s.procs.retire(old)
		s.dropPython(old)
	}
	// Added to the targets before it ran: traced from its start.
	info := &event.Process{PPID: parent, FromStart: true}
	if pp := s.procs.procs[parent]; pp != nil {
		// A fork child is in its parent's cgroup until something moves
		// it: what the parent's record says is right when the child is
		// gone before /proc could be read.
		info.Command, info.Exe, info.Cgroup = pp.info.Command, pp.info.Exe, pp.info.Cgroup
	}
	p, err := s.track(child, info, nil)
	if errors.Is(err, ErrTraced) {
		// Another session took it first (it attached to the new PID in
		// the moment since the fork): it is that session's.
		_ = s.loader.objs.Targets.Delete(child)
		s.loader.epoch.bump()
		return nil
	}
	if err != nil {
		return err
	}
	if pp := s.procs.procs[parent]; pp != nil {
		// Same mappings as the parent until it execs (then the loader
		// announces the new ones).
		for k := range pp.libraries {
			p.libraries[k] = true
		}
		p.cuda = pp.cuda
		p.stripped = slices.Clone(pp.stripped)
		if err := s.inheritPython(p, pp); err != nil {
			return err
		}
	}
	// Learn its maps while it lives: a short-lived worker may be gone
	// before its stacks are read. Until then, and if it is gone already,
	// the parent's: a fork copies them.
	s.stacks.sym.Inherit(child, parent)
	_ = s.stacks.sym.Prepare(child)
	return nil
}

// MonotonicNow is CLOCK_MONOTONIC in ns, the clock bpf_ktime_get_ns reads
// and so the clock of every event.Event.
func MonotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}
