//go:build linux

package probes

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/probes/allocspec"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/python"
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
	// ReorderWindow is the longest events are held for a call in flight,
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
}

// Session traces the CUDA allocation API in a set of processes. It owns the
// BPF objects, the ring buffer reader and every uprobe; Close releases them
// in reverse order. Its methods are not safe for concurrent use, except
// Stats. A Session must be Closed.
type Session struct {
	opts   Options
	objs   bpfObjects
	reader *ringbuf.Reader
	att    *attacher
	// lifeLinks follow targets' forks, execs and exits (tp_btf).
	lifeLinks []link.Link
	// guard resumes what the BPF side stopped if this process dies.
	guard *guardian
	// stops counts the stop records read, for the test hook dieAtStop.
	stops int
	sym   *symbolize.Symbolizer

	allocs  []allocspec.Allocator // built-in and user specs; none with NoPool
	procs   map[uint32]*proc
	notCUDA map[fileKey]bool // files scanned and found to hold nothing to probe
	// stacks interns raw stacks by PID and frames; stackSeq is the last
	// StackID given. An exited process's entries are dropped
	// (forgetExited), so a long session (attach --all, serve) holds the
	// stacks of live processes only; IDs are never reused.
	stacks     map[string]event.StackID
	stackSeq   event.StackID
	stackKey   []byte
	raw        rawRecord
	decodeErrs uint64
	lastLost   uint64
	lastLate   uint64
	order      *reorder // events wait here to go out in effect order
	// mark is the last effect-order watermark read from the threads map
	// (see reorder.go), applied once the ring buffer is next found empty;
	// 0 when none. noMark: the kernel cannot batch-read the map.
	mark        uint64
	noMark      bool
	markKeys    []uint64
	markThreads []bpfThread
	stats       Stats
	closed      bool
	prefetch    pyPrefetch
	// held are processes another session traces (with All: left alone
	// for as long as they live), by PID, with their start time.
	held  map[uint32]uint64
	exits map[uint32]syscall.WaitStatus // see ExitStatus

	// late: runtimes loaded after the session began (late.go).
	late lateState
}

// proc is a traced process.
type proc struct {
	pid       uint32
	startTime uint64           // /proc/PID/stat field 22: tells a reused PID apart
	libraries map[fileKey]bool // probed files this process maps, reported once each
	cuda      bool             // maps at least one probed CUDA library
	// stripped are the files p maps that hold a CUDA runtime without
	// symbols (probedFile.StrippedRuntime), as p maps them.
	stripped  []string
	fromStart bool          // traced from its first instruction (run, or forked from a target)
	info      event.Process // the last Process record written for it
	exited    bool
	// forget: exited, but records of it may still wait in the ring buffer,
	// and they need its maps to symbolize. Dropped once the ring is empty.
	forget  bool
	py      *pyProc // its CPython, once found
	pyNoted bool    // a CPython was found that cannot be read: said once
	lock    *procLock
}

// pyPrefetch is the Python code objects' fast lane (see startPrefetch).
type pyPrefetch struct {
	reader *ringbuf.Reader
	mu     sync.Mutex
	res    map[uint32]*python.Resolver // by pid: the processes with a CPython
	done   chan struct{}
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
	if err := CheckPrivileges(); err != nil {
		return nil, fmt.Errorf("load BPF programs: %w", err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w", wrapPerm(err))
	}
	spec, err := loadBpf()
	if err != nil {
		return nil, fmt.Errorf("load BPF spec: %w", err)
	}
	spec.Maps[bpfMapEvents].MaxEntries = uint32(opts.RingBytes)
	// Wake the reader once an eighth of the ring is waiting; below that it
	// polls every opts.Poll.
	if err := spec.Variables[bpfVarWakeupBytes].Set(uint64(opts.RingBytes / 8)); err != nil {
		return nil, fmt.Errorf("set wakeup threshold: %w", err)
	}
	if opts.All {
		if err := spec.Variables[bpfVarTraceAll].Set(uint8(1)); err != nil {
			return nil, fmt.Errorf("set trace_all: %w", err)
		}
	}
	s := &Session{
		opts:    opts,
		procs:   make(map[uint32]*proc),
		held:    make(map[uint32]uint64),
		notCUDA: make(map[fileKey]bool),
		stacks:  make(map[string]event.StackID),
		sym:     symbolize.New(symbolize.Options{}),
		order:   newReorder(uint64(opts.ReorderWindow)),
	}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		if isPermission(err) {
			return nil, fmt.Errorf("load BPF programs: %w: %w", ErrNotPermitted, err)
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("load BPF programs: %w: %w", ErrNoBPF, err)
		}
		return nil, fmt.Errorf("load BPF programs: %w", err)
	}
	s.reader, err = ringbuf.NewReader(s.objs.Events)
	if err != nil {
		_ = s.objs.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	if err := s.startPrefetch(); err != nil {
		_ = s.reader.Close()
		_ = s.objs.Close()
		return nil, err
	}
	if !opts.NoPool {
		s.allocs = append(allocspec.Builtin(), opts.Allocators...)
	}
	s.att = newAttacher(&s.objs, 0)
	// Before the first probe that can stop a process.
	if s.guard, err = startGuardian(s.objs.Stopped); err != nil {
		_ = s.Close()
		return nil, err
	}
	// Children of targets are targets (the fork tracepoint adds them in the
	// kernel before they run); an exec is a new image to probe; an exit
	// ends a process before its PID can be reused.
	for _, prog := range []*ebpf.Program{s.objs.ProcessFork, s.objs.ProcessExec, s.objs.ProcessExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("attach %s tracepoint: %w", prog, wrapPerm(err))
		}
		s.lifeLinks = append(s.lifeLinks, l)
	}

	return s, nil
}

// Stats returns the session's live counters.
func (s *Session) Stats() *Stats { return &s.stats }

// Close removes every probe, resumes the targets the loader and exec probes
// stopped and the session has not resumed yet (and no other process: one
// the user stopped stays stopped), ends the guardian, closes the reader and
// unloads the BPF objects, in that order. It returns the first error.
func (s *Session) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for i := len(s.lifeLinks) - 1; i >= 0; i-- {
		errs = append(errs, s.lifeLinks[i].Close())
	}
	if s.att != nil {
		errs = append(errs, s.att.Close())
	}
	// A target stopped at a dlopen waits for us: never leave it stopped.
	// With the probes gone, no process is stopped after this.
	if s.objs.Stopped != nil {
		resumeStopped(s.objs.Stopped)
	}
	if s.guard != nil {
		errs = append(errs, s.guard.close())
	}
	if s.reader != nil {
		if err := s.reader.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close ring buffer: %w", err))
		}
	}
	errs = append(errs, s.stopPrefetch())
	if err := s.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("unload BPF objects: %w", err))
	}
	s.sym.Close()
	for _, p := range s.procs {
		s.dropPython(p)
		p.lock.release()
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// track adds pid to the traced set: the BPF filter map, the Process record.
// The record describes the process as /proc shows it now, or as info says
// when given (a fork child is its parent's image until it execs: reading
// /proc later races with that exec, or with its exit).
func (s *Session) track(pid uint32, info *event.Process) (*proc, error) {
	if p, ok := s.procs[pid]; ok && !p.exited {
		return p, nil
	}
	st, err := procStartTime(int(pid))
	if err != nil && info == nil {
		return nil, err
	}
	var lock *procLock
	switch {
	case err != nil:
	case s.opts.All:
		// Every process: look, never lock (lock.go).
		if owner := heldBy(pid, st); owner != 0 {
			return nil, &TracedError{PID: pid, Owner: owner}
		}
	default:
		// One session per process (lock.go): before anything is probed.
		if lock, err = lockProc(pid, st); err != nil {
			return nil, err
		}
	}
	if err := s.objs.Targets.Put(pid, uint8(1)); err != nil {
		lock.release()
		return nil, fmt.Errorf("add pid %d to targets: %w", pid, err)
	}
	p := &proc{pid: pid, startTime: st, libraries: make(map[fileKey]bool), lock: lock}
	s.procs[pid] = p
	s.stats.Targets.Add(1)
	if info == nil {
		info = procInfo(pid)
	}
	info.PID, info.Time = pid, MonotonicNow()
	if err := s.describe(p, info); err != nil {
		return nil, err
	}
	return p, nil
}

// describe writes the Process record of p and keeps it. Events of an
// earlier instance of its PID (an exec replaces the image; a PID is reused)
// still held for effect order go out first: they are that instance's.
func (s *Session) describe(p *proc, info *event.Process) error {
	held := s.order.flushPID(p.pid)
	for i := range held {
		if err := s.opts.Sink.Write(&held[i]); err != nil {
			return fmt.Errorf("write event of pid %d: %w", p.pid, err)
		}
	}
	p.info = *info
	if err := s.opts.Sink.Write(info); err != nil {
		return fmt.Errorf("write process record: %w", err)
	}
	return nil
}

// procInfo describes pid as /proc shows it now.
func procInfo(pid uint32) *event.Process {
	info := &event.Process{PID: pid, Command: procCmdline(int(pid)), PPID: procPPID(int(pid))}
	info.Exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return info
}

// retire marks a process instance exited, leaving the BPF maps alone.
func (s *Session) retire(p *proc) {
	if p.exited {
		return
	}
	p.exited = true
	p.forget = true
	p.lock.release()
	s.stats.Targets.Add(-1)
}

// untrack marks pid exited and stops filtering for it.
func (s *Session) untrack(p *proc) {
	if p.exited {
		return
	}
	s.retire(p)
	_ = s.objs.Targets.Delete(p.pid)
	_ = s.objs.PyProcs.Delete(p.pid)
	// Its threads' state passes the BPF filter by itself (see thread_state):
	// drop it, so a later process that reuses the PID is not traced.
	var key uint64
	var th bpfThread
	var stale []uint64
	for it := s.objs.Threads.Iterate(); it.Next(&key, &th); {
		if uint32(key>>32) == p.pid {
			stale = append(stale, key)
		}
	}
	for _, k := range stale {
		_ = s.objs.Threads.Delete(k)
	}
}

// forgetExited drops the symbolizer's view of processes that exited before
// the ring buffer was last found empty: none of their records remain.
func (s *Session) forgetExited() {
	for _, p := range s.procs {
		if p.forget {
			p.forget = false
			s.sym.Forget(p.pid)
			s.dropPython(p)
			s.forgetStacks(p.pid)
			if s.opts.All {
				// A session that adopts every process (serve runs for
				// weeks) keeps none it has seen exit; a later process
				// with the PID is adopted afresh. ExitStatus is for
				// single-target sessions.
				delete(s.procs, p.pid)
				delete(s.exits, p.pid)
			}
		}
	}
}

// forgetStacks drops pid's interned stacks (keys start with the PID): a
// later process with that PID has other stacks, interned afresh.
func (s *Session) forgetStacks(pid uint32) {
	var prefix [4]byte
	binary.LittleEndian.PutUint32(prefix[:], pid)
	for k := range s.stacks {
		if len(k) >= 4 && k[:4] == string(prefix[:]) {
			delete(s.stacks, k)
		}
	}
}

// scan examines the files p maps and probes the ones that define the CUDA
// allocation API or the loader rendezvous. It is called at start and after
// every change the loader announces.
func (s *Session) scan(p *proc) error {
	files, err := s.probeFiles(p.pid)
	if err != nil {
		return err
	}
	// The symbolizer learns the new maps now, while the process is alive
	// (stopped, when called for the loader): a short-lived process may be
	// gone before its stacks are read.
	if err := s.sym.Prepare(p.pid); err != nil {
		return fmt.Errorf("%w: %d: %w", ErrNoProcess, p.pid, err)
	}
	if err := s.findPython(p); err != nil {
		return err
	}
	for _, f := range files {
		if p.libraries[f.Key] {
			continue
		}
		p.libraries[f.Key] = true
		syms := f.cudaSymbols()
		if len(syms) == 0 && len(f.Skipped) == 0 && !f.StrippedRuntime {
			continue // the loader: not a CUDA library
		}
		p.cuda = p.cuda || len(syms) > 0
		if f.StrippedRuntime {
			p.stripped = append(p.stripped, f.Path)
		}
		lib := &event.Library{PID: p.pid, Path: f.Path, BuildID: f.BuildID, Symbols: syms, Skipped: f.Skipped,
			StrippedRuntime: f.StrippedRuntime}
		if err := s.opts.Sink.Write(lib); err != nil {
			return fmt.Errorf("write library record: %w", err)
		}
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
	var out []*probedFile
	for _, c := range candidates(int(pid), maps) {
		if s.notCUDA[c.Key] {
			continue
		}
		pf := s.att.files[c.Key]
		if pf == nil {
			pf, err = scanFile(c, specs, !s.opts.NoPool, s.allocs)
			if err != nil || pf == nil {
				// Nothing to probe there, or unreadable (then it cannot be
				// probed either): one file must not stop the others.
				s.notCUDA[c.Key] = true
				s.examined(c.Key)
				continue
			}
			if err := s.att.attach(pf); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue // gone (the process exited): maybe next time
				}
				return nil, err
			}
			s.examined(c.Key)
		}
		mapped := *pf
		mapped.candidate = c // this process's path to it
		out = append(out, &mapped)
	}
	return out, nil
}

// Run reads records until ctx is done or every traced process has exited,
// then drains what is left in the ring buffer and writes the final Lost
// record. It does not write event.End: the caller knows why it stopped.
func (s *Session) Run(ctx context.Context) error {
	var rec ringbuf.Record
	lastFlush := time.Now()
	lastTick := time.Now()
	for {
		if ctx.Err() != nil || s.allExited() {
			return s.drain(&rec)
		}
		s.reader.SetDeadline(time.Now().Add(s.opts.Poll))
		before := MonotonicNow()
		err := s.reader.ReadInto(&rec)
		switch {
		case err == nil:
			if err := s.handle(rec.RawSample); err != nil {
				return err
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The ring was empty: every record of a process already known
			// to have exited has been read, and so has every call that
			// returned before the read began.
			s.forgetExited()
			if s.mark != 0 {
				// Read before the ring was emptied: it holds.
				s.order.setMark(s.mark)
			}
			s.mark = s.watermark()
			s.order.advance(before)
			if err := s.release(false); err != nil {
				return err
			}
		case errors.Is(err, ringbuf.ErrClosed):
			return s.release(true)
		default:
			return fmt.Errorf("read ring buffer: %w", err)
		}
		if now := time.Now(); now.Sub(lastTick) >= s.opts.Poll {
			lastTick = now
			if err := s.tick(); err != nil {
				return err
			}
			if now.Sub(lastFlush) >= s.opts.FlushEvery {
				lastFlush = now
				if err := s.opts.Sink.Flush(); err != nil {
					return fmt.Errorf("flush trace: %w", err)
				}
			}
		}
	}
}

// drain reads what the ring buffer still holds without waiting for more.
func (s *Session) drain(rec *ringbuf.Record) error {
	for {
		s.reader.SetDeadline(time.Now())
		err := s.reader.ReadInto(rec)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ringbuf.ErrClosed) {
				break
			}
			return fmt.Errorf("drain ring buffer: %w", err)
		}
		if err := s.handle(rec.RawSample); err != nil {
			return err
		}
	}
	// Every call traced has returned, or never will (its process exited,
	// or the session stops): nothing can arrive before what is held.
	if err := s.release(true); err != nil {
		return err
	}
	if err := s.writeLost(true); err != nil {
		return err
	}
	return s.opts.Sink.Flush()
}

// tick does the periodic work: lost-record accounting, noticing exits.
func (s *Session) tick() error {
	for pid, st := range s.held {
		// Gone, or the PID is another process's now (the exit of a
		// process that is not ours is not announced).
		if now, err := procStartTime(int(pid)); err != nil || now != st {
			delete(s.held, pid)
		}
	}
	for _, p := range s.procs {
		if p.exited {
			continue
		}
		if st, err := procStartTime(int(p.pid)); err != nil || st != p.startTime {
			s.untrack(p)
			continue
		}
		if s.opts.All {
			// A single-process session took it since: left to that
			// session from now on (lock.go), no longer stopped by us.
			if owner := heldBy(p.pid, p.startTime); owner != 0 {
				s.untrack(p)
				s.hold(p.pid, &TracedError{PID: p.pid, Owner: owner})
			}
		}
	}
	if err := s.resumeDeferred(); err != nil {
		return err
	}
	return s.writeLost(false)
}

// writeLost writes a Lost record when the total changed (or always, when
// final), so every output carries the count, even when it is zero.
func (s *Session) writeLost(final bool) error {
	var lost, unpaired uint64
	if err := s.objs.Lost.Get(&lost); err != nil {
		return fmt.Errorf("read lost counter: %w", err)
	}
	if err := s.objs.Unpaired.Get(&unpaired); err != nil {
		return fmt.Errorf("read unpaired counter: %w", err)
	}
	total := lost + unpaired + s.decodeErrs
	late := s.order.late
	s.stats.Lost.Store(total)
	s.stats.Late.Store(late)
	if total == s.lastLost && late == s.lastLate && !final {
		return nil
	}
	s.lastLost, s.lastLate = total, late
	if err := s.opts.Sink.Write(&event.Lost{Time: MonotonicNow(), Total: total, Late: late}); err != nil {
		return fmt.Errorf("write lost record: %w", err)
	}
	return nil
}

func (s *Session) allExited() bool {
	if len(s.procs) == 0 || s.opts.All {
		return false // --all waits for processes yet to come
	}
	for _, p := range s.procs {
		if !p.exited {
			return false
		}
	}
	return true
}

// handle decodes one ring buffer sample and passes it on.
func (s *Session) handle(sample []byte) error {
	r := &s.raw
	if err := decodeRecord(sample, r); err != nil {
		s.decodeErrs++
		return nil
	}
	if _, ok := s.held[r.ev.PID]; ok {
		s.heldRecord(r) // another session's (All): left alone (see tick)
		return nil
	}
	if s.opts.All && s.procs[r.ev.PID] == nil && r.kind != recFork && r.kind != recExit {
		// A process not seen before: one that maps a probed copy of the
		// runtime already (its calls pass the filter), or one whose loader
		// just mapped something.
		if held, err := s.adoptLate(r); err != nil || held {
			return err
		}
	}
	switch {
	case r.kind == recLoader || r.kind == recExec:
		return s.loaderChanged(r)
	case r.kind == recFork:
		return s.forked(r)
	case r.kind == recExit:
		if p := s.procs[r.ev.PID]; p != nil {
			s.noteExit(p.pid, r.ev.Addr)
			s.untrack(p)
		}
		return nil
	case r.ev.Kind == event.KindInvalid:
		s.decodeErrs++
		return nil
	}
	switch r.ev.Kind {
	case event.KindHostAlloc, event.KindHostFree, event.KindReserve, event.KindUnreserve:
		// Pinned host memory and virtual address space belong to no
		// device, whatever device the calling thread had chosen.
		r.ev.Device = event.DeviceUnknown
	case event.KindAlloc, event.KindFree:
		if r.ev.Device == event.DeviceUnknown {
			// A thread that has not chosen a device uses device 0 (CUDA's
			// default), but that is known only for a process seen from
			// its start: attached later, it may have chosen before.
			if p := s.procs[r.ev.PID]; p != nil && p.fromStart {
				r.ev.Device = 0
			}
		}
	}
	if len(r.frames) > 0 || len(r.py) > 0 {
		id, err := s.intern(r.ev.PID, withCaller(r.frames, r.caller), r.py, r.flags&(recFlagPyTrunc|recFlagPyBroke))
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
		n, err := s.objs.Threads.BatchLookup(&cursor, s.markKeys, s.markThreads, nil)
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

// release writes the held events that are due, in effect order; all of
// them when all is true.
func (s *Session) release(all bool) error {
	for ev := s.order.pop(all); ev != nil; ev = s.order.pop(all) {
		if err := s.opts.Sink.Write(ev); err != nil {
			return fmt.Errorf("write event: %w", err)
		}
	}
	return nil
}

// loaderChanged rescans a process whose link map changed, then resumes it
// if the BPF side stopped it.
func (s *Session) loaderChanged(r *rawRecord) error {
	if r.flags&recFlagStopped != 0 {
		s.stops++
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
	p := s.procs[r.ev.PID]
	var err error
	if p != nil && !p.exited {
		if r.kind == recExec {
			// A new image (stopped before its first instruction): the
			// process is what it now runs.
			info := procInfo(p.pid)
			info.Time = MonotonicNow()
			err = s.describe(p, info)
			s.dropPython(p) // the BPF side forgot it too
		}
		if err == nil {
			err = s.scan(p)
		}
	}
	if r.flags&recFlagStopped != 0 {
		if kerr := syscall.Kill(int(r.ev.PID), syscall.SIGCONT); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			err = errors.Join(err, fmt.Errorf("resume pid %d: %w", r.ev.PID, kerr))
		}
		s.resumed(r.ev.Addr)
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
	_ = s.objs.Stopped.Delete(seq)
}

// dieAtStop is a test hook, from $VRAMPROF_TEST_DIE_AT_STOP: the session
// kills itself with SIGKILL when it reads its Nth stop record, before it
// resumes the process, so that tests can check that the guardian resumes
// it. 0 (unset) is off. Never set it outside tests.
var dieAtStop, _ = strconv.Atoi(os.Getenv("VRAMPROF_TEST_DIE_AT_STOP"))

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
	if err := s.watchMappings(); err != nil {
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
		if err := s.adopt(uint32(pid)); err != nil {
			return err
		}
	}
	return nil
}

// adopt probes what pid maps and tracks it if it maps a CUDA library
// (Options.All). Processes that vanish or cannot be read are skipped; one
// that cannot be probed for another reason (a file it maps deleted since,
// an attach the kernel refuses) is left alone with a note: one process must
// not end a session that traces every process.
func (s *Session) adopt(pid uint32) error {
	files, err := s.probeFiles(pid)
	if err != nil {
		if errors.Is(err, ErrNoProcess) || isPermission(err) {
			return nil
		}
		s.giveUp(pid, err)
		return nil
	}
	for _, f := range files {
		if len(f.cudaSymbols()) > 0 {
			p, err := s.track(pid, nil)
			var held *TracedError
			if errors.As(err, &held) {
				s.hold(pid, held)
				return nil
			}
			if err != nil {
				if !errors.Is(err, ErrNoProcess) {
					s.giveUp(pid, err)
				}
				return nil
			}
			if err := s.scan(p); err != nil {
				s.untrack(p)
				if !errors.Is(err, ErrNoProcess) {
					s.giveUp(pid, err)
				}
			}
			return nil
		}
	}
	return nil
}

// giveUp leaves alone, for as long as it lives, a process adopt could not
// probe (All), and says why once.
func (s *Session) giveUp(pid uint32, why error) { s.leave(pid, why.Error()) }

// hold leaves pid to the session that traces it (All), and says so once.
func (s *Session) hold(pid uint32, why *TracedError) {
	reason := ErrTraced.Error()
	if why.Owner != 0 {
		reason += fmt.Sprintf(" (vramprof pid %d)", why.Owner)
	}
	s.leave(pid, reason)
}

// leave keeps pid out of the session for as long as that process lives
// (its records are dropped in handle until tick sees it gone) and notes
// the reason once.
func (s *Session) leave(pid uint32, reason string) {
	st, err := procStartTime(int(pid))
	if err != nil {
		return
	}
	if old, ok := s.held[pid]; ok && old == st {
		return // said already
	}
	s.held[pid] = st
	if s.opts.Note != nil {
		s.opts.Note(fmt.Sprintf("skipping pid %d: %s", pid, reason))
	}
}

// forked starts tracking a target's child (the BPF side has already added it
// to the targets map, so none of its calls were missed).
func (s *Session) forked(r *rawRecord) error {
	child, parent := r.ev.PID, uint32(r.ev.Addr)
	if old := s.procs[child]; old != nil {
		// The PID belonged to a process whose exit was not seen (its
		// records are all before this one): this is another process.
		s.retire(old)
		s.dropPython(old)
	}
	info := &event.Process{PPID: parent}
	if pp := s.procs[parent]; pp != nil {
		info.Command, info.Exe = pp.info.Command, pp.info.Exe
	}
	p, err := s.track(child, info)
	if errors.Is(err, ErrTraced) {
		// Another session took it first (it attached to the new PID in
		// the moment since the fork): it is that session's.
		_ = s.objs.Targets.Delete(child)
		return nil
	}
	if err != nil {
		return err
	}
	p.fromStart = true
	if pp := s.procs[parent]; pp != nil {
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
	s.sym.Inherit(child, parent)
	_ = s.sym.Prepare(child)
	return nil
}

// intern returns the StackID of the raw stack of pid, symbolizing it and
// writing its Mapping and Stack records the first time it is seen.
func (s *Session) intern(pid uint32, frames, py []uint64, pyFlags uint8) (event.StackID, error) {
	key := s.stackKey[:0]
	key = binary.LittleEndian.AppendUint32(key, pid)
	key = binary.LittleEndian.AppendUint16(key, uint16(len(frames)))
	for _, f := range frames {
		key = binary.LittleEndian.AppendUint64(key, f)
	}
	key = append(key, pyFlags)
	for _, f := range py {
		key = binary.LittleEndian.AppendUint64(key, f)
	}
	s.stackKey = key
	if id, ok := s.stacks[string(key)]; ok { // no allocation: the compiler sees the lookup
		return id, nil
	}
	// Python code objects first: they are read from the process's memory,
	// which an exiting process frees soon; the native symbols come from
	// files and can wait (the first lookup in a large library with DWARF
	// lines takes a while).
	var segs [][]event.Frame
	if p := s.procs[pid]; p != nil && p.py != nil && len(py) > 0 {
		segs = pySegments(p.py, py, pyFlags)
	}
	syms, maps, err := s.sym.Symbolize(pid, frames)
	if err != nil {
		// An unsymbolizable stack is still a stack: keep the addresses.
		syms = make([]event.Frame, len(frames))
		for i, a := range frames {
			syms[i] = event.Frame{Addr: a}
		}
		maps = nil
	}
	syms = mergeStacks(syms, segs)
	for i := range maps {
		if err := s.opts.Sink.Write(&maps[i]); err != nil {
			return 0, fmt.Errorf("write mapping record: %w", err)
		}
	}
	s.stackSeq++
	id := s.stackSeq
	s.stacks[string(key)] = id
	if err := s.opts.Sink.Write(&event.Stack{ID: id, PID: pid, Frames: syms}); err != nil {
		return 0, fmt.Errorf("write stack record: %w", err)
	}
	return id, nil
}

// MonotonicNow is CLOCK_MONOTONIC in ns, the clock bpf_ktime_get_ns reads
// and so the clock of every event.Event.
func MonotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// procStartTime reads the start time of pid (clock ticks since boot), which
// tells a process apart from a later one that reuses its PID.
func procStartTime(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("%w: %d", ErrNoProcess, pid)
	}
	// The command name (field 2) may hold spaces and parentheses: fields
	// are counted from the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(fields))
	}
	return strconv.ParseUint(fields[19], 10, 64) // field 22 overall
}

// procState is the state letter of /proc/PID/stat ('T': stopped), 0 when
// unreadable.
func procState(pid int) byte {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}

func procPPID(pid int) uint32 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(data), ')')
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.ParseUint(fields[1], 10, 32)
	return uint32(ppid)
}

func procCmdline(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}
