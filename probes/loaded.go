//go:build linux

package probes

// Runtimes loaded after the start, under Options.All (attach --all,
// serve). A process that dlopen()s a copy of the CUDA runtime or driver
// that no probe covers yet would make its first calls while user space is
// still reading the library's symbols: the loader announces the new
// mapping, but an --all session does not stop every process on the host at
// every dlopen.
//
// So the kernel tells the one case apart (bpf/vramprof.bpf.c, file_faulted
// and loader_state): a process that faults on a mapping of a file this
// session has not examined yet is "pending" (the loader reads a library it
// maps before it announces it), and the loader's next rendezvous in it
// stops it, as a single-process session stops its target. handle adopts it
// (the new file is examined, probed when it holds CUDA functions) and
// loaderChanged resumes it: its first call into the new copy is traced. A
// file examined once goes into the BPF map known_files and stops nobody
// again; AttachAll's scan of /proc fills that map with every code file
// mapped when the session starts. Files a stopped process maps that are not
// ELF (data: weights, datasets) go there too (knowData), so that faults on
// them do not make it pending again; an ELF file is known only once
// examined as code. A process with a controlling terminal or under a
// debugger is never stopped (may_stop_other): a shell's job control or the
// debugger would see the stop.
//
// A file is known by the key the faults carry: the device and inode of the
// page cache's file. On overlayfs (a container's root) that is the file in
// the layer underneath, while stat(2) and /proc/PID/maps give the overlay's
// device: examined puts both keys in known_files, the second found by
// faulting on the file from vramprof itself (realKey). Without it, every
// dlopen of a containerised process would stop it again.
//
// Page faults rather than mmap(2): a raw syscall tracepoint puts every
// system call of every process on the slow path (getppid went from ~170
// to ~270 ns here with one attached), and fentry/LSM programs need the
// function tracer, which this machine's kernel lacks.
//
// A process another session traces (held) may be stopped by both sessions
// at one rendezvous: that session resumes it once it has probed, and this
// one must not resume it earlier (deferStop): not when the process was
// adopted before that session locked it (loaderChanged), nor when this
// session ends or dies (resumeStopped).

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/symbolize"
)

// watchMappings attaches map_fault and map_pages, which mark processes
// that fault on an unexamined file, and makes the BPF side quiet (see
// preload.go). Called by NewSession, before any process is probed: under
// Options.All, before AttachAll scans /proc, so that no mapping falls
// between the scan and the watch.
func (s *Session) watchMappings() error {
	for _, prog := range []*ebpf.Program{s.loader.objs.MapFault, s.loader.objs.MapPages} {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			return fmt.Errorf("attach file fault watch %s: %w", prog, wrapPerm(err))
		}
		s.loader.lifeLinks = append(s.loader.lifeLinks, l)
	}
	if err := s.loader.objs.Quiet.Set(uint8(1)); err != nil {
		return fmt.Errorf("set quiet: %w", err)
	}
	s.watching = true
	return nil
}

// knowData marks as known the files pid maps that are not ELF (data), after
// a stop: faults on them would make it pending again at once. ELF files are
// left to probeFiles, which marks the ones it examines.
func (s *Session) knowData(pid uint32) {
	maps, err := symbolize.ReadMaps(int(pid))
	if err != nil {
		return
	}
	seen := make(map[string]bool)
	for _, m := range maps {
		if m.Path == "" || m.Path[0] != '/' || m.Deleted || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		p := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), m.Path)
		var st syscall.Stat_t
		if syscall.Stat(p, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			continue
		}
		k := fileKey{Dev: st.Dev, Inode: st.Ino}
		if s.loads.known[k] {
			continue
		}
		if !isELF(p) {
			s.examined(k, p, false)
		}
	}
}

// isELF reports whether the file at path starts with ELF's magic number;
// an unreadable file counts as ELF (not marked: it may be code).
func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return true
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return false // shorter than a header: not code
	}
	return string(magic[:]) == elf.ELFMAG
}

// examined tells the kernel that the file k, opened at path, has been
// looked at (probed, or found to hold nothing to probe, or data): mapping
// it stops nobody from now on. A probed file's first fault in each process
// is announced instead (REC_MAPPED, see mappedFile). Only while map_fault
// and map_pages run (watching). An error is ignored: the worst outcome is
// one more stop of a process that maps the file, or a Library record left
// to the scan at its next rendezvous.
func (s *Session) examined(k fileKey, path string, probed bool) {
	if !s.watching || s.loads.known[k] {
		return
	}
	if s.loads.known == nil || len(s.loads.known) >= maxKnown {
		s.loads.known = make(map[fileKey]bool)
		s.loads.under = make(map[fileKey]fileKey)
	}
	s.loads.known[k] = true
	v := bpfKnownKNOWN_EXAMINED
	if probed {
		v = bpfKnownKNOWN_PROBED
	}
	_ = s.loader.objs.KnownFiles.Update(bpfFileKey{Dev: k.Dev, Ino: k.Inode}, v, ebpf.UpdateAny)
	if rk, ok := s.realKey(path); ok && rk != k {
		_ = s.loader.objs.KnownFiles.Update(bpfFileKey{Dev: rk.Dev, Ino: rk.Inode}, v, ebpf.UpdateAny)
		s.loads.under[rk] = k
	}
}

// mappedFile writes the Library record of a probed file a process mapped
// without a stop (REC_MAPPED: the file was probed before, by preload or
// for another process), unless its scan did already. The record comes
// from the page fault itself: a process that exits before the reader
// reads its maps still gets it. A file with USDT semaphores is left to
// the scan, which raises them from the process's maps.
func (s *Session) mappedFile(r *rawRecord) error {
	p := s.procs.procs[r.ev.PID]
	if p == nil || p.exited {
		return nil
	}
	k := fileKey{Dev: r.ev.Addr, Inode: r.ev.Size}
	if over, ok := s.loads.under[k]; ok {
		k = over
	}
	pf := s.loader.att.files[k]
	if pf == nil || p.libraries[k] || len(semaphoreSites(pf)) > 0 {
		return nil
	}
	p.libraries[k] = true
	return s.writeLibrary(p, pf)
}

// overlayMagic is overlayfs's file system type (statfs(2) f_type).
const overlayMagic = 0x794c7630

// realKey returns the key a page fault on the file at path carries, when
// path is on overlayfs (the file underneath, see the top of this file): it
// maps the file's first page and reads it on a thread that resolve_key
// watches. Any other file fault of that thread in between (a first run of
// one of vramprof's own code pages) would answer instead: a warm-up run of
// the same calls first makes that unlikely, and a wrong answer costs one
// more stop only, as without this.
func (s *Session) realKey(path string) (fileKey, bool) {
	var fs unix.Statfs_t
	if unix.Statfs(path, &fs) != nil || fs.Type != overlayMagic {
		return fileKey{}, false
	}
	f, err := os.Open(path)
	if err != nil {
		return fileKey{}, false
	}
	defer f.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := uint32(unix.Gettid())
	if !touchFirstPage(f) { // the warm-up: empty or unmappable files end here
		return fileKey{}, false
	}
	if s.loader.objs.ResolveKey.Update(tid, bpfFileKey{}, ebpf.UpdateAny) != nil {
		return fileKey{}, false
	}
	defer func() { _ = s.loader.objs.ResolveKey.Delete(tid) }()
	touchFirstPage(f)
	var key bpfFileKey
	if s.loader.objs.ResolveKey.Lookup(tid, &key) != nil || key == (bpfFileKey{}) {
		return fileKey{}, false
	}
	return fileKey{Dev: key.Dev, Inode: key.Ino}, true
}

// touched keeps touchFirstPage's read from being optimised away: an
// atomic store of what was read.
var touched atomic.Uint32

// touchFirstPage maps f's first page and reads it: a page fault on f in a
// fresh mapping. It reports whether f could be mapped and read: an empty
// file cannot, and one truncated meanwhile faults (SIGBUS, recovered).
func touchFirstPage(f *os.File) (ok bool) {
	if st, err := f.Stat(); err != nil || st.Size() == 0 {
		return false
	}
	b, err := unix.Mmap(int(f.Fd()), 0, 1, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false
	}
	defer func() { ok = unix.Munmap(b) == nil && ok }()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	touched.Store(uint32(b[0]))
	return true
}

// adoptLoaded adopts the process of r, a record of a process not tracked yet
// (handle, Options.All). held reports that it is another session's: r has
// been dealt with. A loader record that did not stop the process (it has a
// controlling terminal or a debugger, see may_stop_other) while adopt
// probed a new file for it means the process ran on meanwhile: that is
// said once, since calls made before the probes were in place are missed.
func (s *Session) adoptLoaded(r *rawRecord) (held bool, err error) {
	pid, before := r.ev.PID, len(s.loader.att.files)
	var args []string
	if r.kind == recMapped {
		args = mappedArgs(r)
	}
	if err := s.adopt(pid, args); err != nil {
		return false, err
	}
	if _, ok := s.procs.held[pid]; ok {
		s.heldRecord(r)
		return true, nil
	}
	if r.kind == recMapped && s.procs.procs[pid] == nil {
		if err := s.adoptGone(r); err != nil {
			return false, err
		}
	}
	if r.kind == recLoader && r.flags&recFlagStopped != 0 {
		s.knowData(pid)
	}
	if r.kind == recLoader && r.flags&recFlagStopped == 0 && len(s.loader.att.files) > before && s.procs.procs[pid] != nil && s.opts.Note != nil {
		s.opts.Note(fmt.Sprintf("pid %d loaded a CUDA library no probe covered yet and was not stopped for it "+
			"(it has a controlling terminal or a debugger): its calls before the probes were in place are missed", pid))
	}
	return false, nil
}

// adoptGone tracks, as its REC_MAPPED record describes it, a process that
// mapped a probed file and was gone before adopt could read /proc (a short
// job under serve or attach --all), so that its calls are not counted
// under a process with no command, start or cgroup. The record gives its
// command line (its first MAPPED_ARGS bytes), start time and parent; its
// cgroup is its parent's (a process stays in the cgroup it was forked in
// unless something moves it), read while the parent lives. A zombie (its
// maps are empty: adopt found nothing to probe) is gone too; a PID that
// is another process's by now is left.
func (s *Session) adoptGone(r *rawRecord) error {
	pid := r.ev.PID
	start := r.ev.Duration / clockTicksNs
	if now, err := procStartTime(int(pid)); err == nil && now != start {
		return nil
	}
	info := &event.Process{
		PPID:    uint32(r.ev.Ret),
		Start:   start,
		Command: mappedArgs(r),
	}
	if pp := s.procs.procs[info.PPID]; pp != nil && !pp.exited {
		info.Cgroup = pp.info.Cgroup
	} else if p, err := procOf(int(info.PPID)); err == nil {
		info.Cgroup = procCgroup(p)
	}
	_, err := s.track(pid, info, nil)
	var held *TracedError
	if err != nil && !errors.As(err, &held) && !errors.Is(err, ErrNoProcess) {
		s.procs.giveUp(pid, err)
	}
	return nil
}

// mappedArgs is the command line a REC_MAPPED record carries (its first
// MAPPED_ARGS bytes).
func mappedArgs(r *rawRecord) []string {
	return splitArgs(r.frames()[:max(0, min(int(r.ev.Device), len(r.frames())))])
}

// splitArgs splits a command line as /proc/PID/cmdline holds it (each
// argument NUL-terminated; the last may be cut short) into its arguments.
func splitArgs(b []byte) []string {
	var args []string
	for len(b) > 0 {
		arg, rest, _ := bytes.Cut(b, []byte{0})
		args = append(args, string(arg))
		b = rest
	}
	return args
}

// loadState is a Session's part in this file.
type loadState struct {
	// known mirrors the BPF map known_files, so that a file is put there
	// once; cleared when it reaches maxKnown (the BPF map is an LRU of
	// that size: an entry put again costs a map update).
	known map[fileKey]bool
	// under maps the key a page fault on an examined overlayfs file
	// carries (realKey) to the key stat gives, for REC_MAPPED.
	under map[fileKey]fileKey
	// deferred are this session's stops of held processes.
	deferred []deferredStop
}

// maxKnown is known_files' size (bpf/vramprof.bpf.c).
const maxKnown = 65536

// heldRecord handles a record of a process another session traces (held):
// dropped, but when this session stopped it (a pending process, see the
// top of this file), the stop is deferred to resumeDeferred.
func (s *Session) heldRecord(r *rawRecord) {
	if (r.kind == recLoader || r.kind == recExec) && r.flags&recFlagStopped != 0 {
		s.deferStop(r.ev.PID, r.ev.Addr)
	}
}

// deferredStop is a stop of a held process this session made and has not
// resumed: the session that holds it resumes it after its own probing.
type deferredStop struct {
	pid   uint32
	start uint64 // the process's start time, as /proc shows it
	seq   uint64 // the stopped map's key
}

// deferStop keeps stop seq of pid for resumeDeferred, and leaves a marker
// for the session that holds pid (see takeDeferred).
func (s *Session) deferStop(pid uint32, seq uint64) {
	st, err := procStartTime(int(pid))
	if err != nil {
		s.resumed(seq) // gone: nothing to resume
		return
	}
	d := deferredStop{pid: pid, start: st, seq: seq}
	if !noMarkers {
		if f, err := os.OpenFile(d.marker(), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644); err == nil {
			_ = f.Close()
		}
	}
	s.loads.deferred = append(s.loads.deferred, d)
}

// noMarkers is a test hook, from $VRAMPROF_TEST_NO_DEFER_MARKERS=1: an
// All session defers its stops without markers, as sessions of versions
// before them did, so that tests can check that the holder still resumes
// what they stopped. Never set it outside tests.
var noMarkers = os.Getenv("VRAMPROF_TEST_NO_DEFER_MARKERS") == "1"

// marker is the file that tells the session holding d's process that
// this session stopped it and waits for it to resume it:
// LockDir/<pid>-<start>.<this session's PID>-<seq>.deferred.
func (d deferredStop) marker() string {
	return filepath.Join(LockDir, fmt.Sprintf("%d-%d.%d-%d.deferred", d.pid, d.start, os.Getpid(), d.seq))
}

// settle forgets d: its stop ended (or its process), or this session ends.
func (s *Session) settle(d deferredStop) {
	_ = os.Remove(d.marker())
	s.resumed(d.seq)
}

// takeDeferred resumes the targets of this session (one that holds its
// processes' locks) that another session stopped at a library load and
// left to it. An Options.All session stops a process at a rendezvous
// where this one may have stopped it too, and leaves the SIGCONT to this
// one, which sends it once it has probed (deferStop). A quiet session
// (preload.go) may not have stopped it at all: the file was examined here
// already, and nobody else would resume it. So a target is resumed here
// when it is stopped while this session has no stop of its own in the
// stopped map, and stopped at the loader's rendezvous (atRendezvous: not
// a stop of the user's, which lands anywhere else), and resume finds no
// stop signal of the user's pending. Looked at for a process an All
// session left a marker for (deferStop), or whose loader announced a
// change without a stop of this session's in the last rendezvousWatch;
// a marker is removed once the stop it names is over (see below).
func (s *Session) takeDeferred() {
	if s.opts.All {
		return
	}
	now := MonotonicNow()
	for pid, p := range s.procs.procs {
		if p.exited || p.lock == nil {
			continue
		}
		found, _ := filepath.Glob(filepath.Join(LockDir, fmt.Sprintf("%d-%d.*.deferred", pid, p.startTime)))
		if len(found) == 0 && (p.rendezvousAt == 0 || now-p.rendezvousAt > uint64(rendezvousWatch)) {
			continue
		}
		resumed := false
		if procState(int(pid)) == 'T' && !s.stoppedHere(pid) && s.atRendezvous(pid) {
			user, err := resume(int(pid))
			if err == nil && user != 0 && s.opts.Note != nil {
				s.opts.Note(fmt.Sprintf("pid %d was sent %v while stopped at a library load: left stopped", pid, user))
			}
			resumed = err == nil && user == 0
		}
		// A marker stays until its stop is over: the other session reads
		// its stop record before the signal takes effect, so a look may
		// find the process running (or stopped by this session, before
		// its SIGCONT) and the other session's stop land after it. Removed
		// once this session resumed the process, or when the session that
		// wrote it is gone; that session's settle removes it otherwise.
		for _, f := range found {
			if resumed || !markerOwnerAlive(f) {
				_ = os.Remove(f)
			}
		}
	}
}

// markerOwnerAlive reports whether the session that wrote deferred marker
// path (see deferredStop.marker) still runs.
func markerOwnerAlive(path string) bool {
	name := strings.TrimSuffix(filepath.Base(path), ".deferred")
	_, owner, _ := strings.Cut(name, ".")
	pid, _, _ := strings.Cut(owner, "-")
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return false
	}
	return syscall.Kill(n, 0) == nil
}

// rendezvousWatch is how long after a rendezvous this session did not stop
// at it takeDeferred looks for another session's stop there: that stop
// lasts until someone resumes it, so one look after it took effect is
// enough; the watch bounds the /proc reads to processes that just loaded.
const rendezvousWatch = 2 * time.Second

// atRendezvous reports whether a thread of pid is stopped at the loader's
// rendezvous (_dl_debug_state, which this session probes): its program
// counter in the function (past the probed instruction), or just past a
// call to it, or to a function that tail-jumps to it (jumpsTo), where it
// is when the function is a lone ret that the uprobe emulated. /proc/PID/task/TID/syscall gives a thread's stack pointer and
// program counter when it is blocked outside a system call: "-1 SP PC".
func (s *Session) atRendezvous(pid uint32) bool {
	maps, err := symbolize.ReadMaps(int(pid))
	if err != nil {
		return false
	}
	var fns []uint64 // runtime addresses of _dl_debug_state in pid
	for _, c := range candidates(int(pid), maps) {
		pf := s.loader.att.files[c.Key]
		if pf == nil {
			continue
		}
		for _, t := range pf.Targets {
			if t.Spec.Prog != progLoader {
				continue
			}
			for _, m := range maps {
				if m.Path == c.Path && m.Exec() && t.Offset >= m.Offset && t.Offset < m.Offset+(m.End-m.Start) {
					fns = append(fns, m.Start+t.Offset-m.Offset)
				}
			}
		}
	}
	if len(fns) == 0 {
		return false
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return false
	}
	defer mem.Close()
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, task.Name()))
		f := strings.Fields(string(b))
		if err != nil || len(f) != 3 || f[0] != "-1" {
			continue
		}
		pc, err := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 64)
		if err != nil || pc < 5 {
			continue
		}
		var call [5]byte
		_, rerr := mem.ReadAt(call[:], int64(pc-5))
		for _, fn := range fns {
			if pc >= fn && pc < fn+16 {
				return true
			}
			if rerr != nil || call[0] != 0xe8 {
				continue
			}
			target := pc + uint64(int64(int32(binary.LittleEndian.Uint32(call[1:]))))
			if target == fn || jumpsTo(mem, target, fn) {
				return true
			}
		}
	}
	return false
}

// jumpsTo reports whether the function at addr in mem ends its first 32
// bytes' path to fn with a tail jump (jmp rel32 or rel8): glibc 2.39's
// _dl_debug_change_state sets r_state and jumps to _dl_debug_state, so the
// emulated ret of a stop there lands past the call to the wrapper.
func jumpsTo(mem *os.File, addr, fn uint64) bool {
	var b [32]byte
	n, _ := mem.ReadAt(b[:], int64(addr))
	for i := 0; i < n; i++ {
		switch {
		case b[i] == 0xe9 && i+5 <= n:
			if addr+uint64(i)+5+uint64(int64(int32(binary.LittleEndian.Uint32(b[i+1:])))) == fn {
				return true
			}
		case b[i] == 0xeb && i+2 <= n:
			if addr+uint64(i)+2+uint64(int64(int8(b[i+1]))) == fn {
				return true
			}
		}
	}
	return false
}

// stoppedHere reports whether this session's stopped map lists a stop of
// pid that it has not resumed yet.
func (s *Session) stoppedHere(pid uint32) bool {
	var seq uint64
	var st bpfStop
	it := s.loader.objs.Stopped.Iterate()
	for it.Next(&seq, &st) {
		if st.Tgid == pid {
			return true
		}
	}
	return false
}

// resumeDeferred settles the deferred stops (from tick). A process that
// runs again was resumed by the session that holds it: this session's stop
// is forgotten. One that this session's peer no longer holds (that session
// ended) and is still stopped is resumed here. Until then the entry stays
// in the stopped map, so that Close or the guardian resume it if this
// session ends first.
func (s *Session) resumeDeferred() error {
	var errs []error
	kept := s.loads.deferred[:0]
	for _, d := range s.loads.deferred {
		st, err := procStartTime(int(d.pid))
		switch {
		case err != nil || st != d.start:
			s.settle(d) // gone
		case procState(int(d.pid)) != 'T':
			s.settle(d) // resumed by its session
		case heldBy(d.pid, d.start) == 0:
			if _, kerr := resume(int(d.pid)); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("resume pid %d: %w", d.pid, kerr))
			}
			s.settle(d)
		default:
			kept = append(kept, d)
		}
	}
	s.loads.deferred = kept
	return errors.Join(errs...)
}
