package symbolize

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/vramprof/vramprof/probes/event"
)

// maxMisses bounds the per-process set of addresses known to lie in no
// mapping (JIT code, garbage from a broken frame chain). The set spares a
// /proc/PID/maps read (about a millisecond for a big PyTorch process) per
// stack for such addresses; past the bound it is simply cleared.
const maxMisses = 4096

// missTTL is how long a miss is trusted. A stack's addresses were mapped
// when BPF took it, so a miss is nearly always memory that is not a file;
// but memory can be unmapped and a library mapped in its place, so misses
// expire. A variable for tests.
var missTTL = 2 * time.Second

// Options configure a Symbolizer.
type Options struct {
	// ProcRoot is where procfs is mounted: "" means /proc. Tests point it
	// at a directory laid out like /proc.
	ProcRoot string
	// NoLines skips DWARF file:line resolution: less memory and time for
	// big libraries that carry debug info, at the cost of bare function
	// names.
	NoLines bool
}

// Symbolizer resolves user stacks of many processes. It caches each ELF file
// (by device, inode, modification time and size, so a file replaced on disk
// is reopened) and each process's executable mappings (re-read when an
// address falls outside all of them, as after a dlopen).
//
// A Symbolizer is safe for concurrent use; calls are serialized. It must be
// Closed to release the files it opened.
type Symbolizer struct {
	opts Options

	mu     sync.Mutex
	files  map[fileKey]*fileSlot
	procs  map[uint32]*proc
	nextID event.MappingID
}

// fileKey identifies file contents without reading them. The path is in
// too: some filesystems (FUSE, some overlays) report inode 0 or reuse one,
// and processes sharing a library share its path as well.
type fileKey struct {
	dev   string
	inode uint64
	mtime int64
	size  int64
	path  string
}

// fileSlot caches an open File or why it could not be opened, so a missing
// or unreadable file is tried once, not per stack.
type fileSlot struct {
	file *File
	err  error
}

// proc is what is known of one process.
type proc struct {
	maps   []*mapping          // executable mappings now, sorted by Start
	known  map[mapKey]*mapping // every mapping ever seen: keeps IDs stable across re-reads
	misses map[uint64]struct{} // addresses in no mapping at the last read
	readAt time.Time           // when the maps were last read
}

// mapKey identifies a mapping of a process across re-reads of its maps.
type mapKey struct {
	start, offset, inode uint64
	path                 string
}

type mapping struct {
	MapEntry
	id     event.MappingID
	opened bool
	file   *File // nil when it could not be opened
	sent   bool  // the caller has been given the Mapping record
}

// New returns a Symbolizer.
func New(opts Options) *Symbolizer {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	return &Symbolizer{opts: opts, files: make(map[fileKey]*fileSlot), procs: make(map[uint32]*proc)}
}

// Symbolize resolves a stack of process pid, leaf first: addrs[0] is the
// probed function's entry, the rest are return addresses (looked up one
// byte earlier, so a call ending a function resolves to that function;
// Frame.Addr keeps the original address). An address in no mapping gives a
// frame with only Addr; one in a file without symbols also has its Mapping.
//
// The returned Mappings are those the frames use that no earlier call
// returned: write them to the trace before the stack. Their IDs are unique
// within the Symbolizer and stable for a process's lifetime.
//
// The error is for a process whose maps cannot be read (it exited, or no
// permission); the frames then carry addresses only. Files that cannot be
// opened are not errors: their frames lack names.
func (s *Symbolizer) Symbolize(pid uint32, addrs []uint64) ([]event.Frame, []event.Mapping, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Frames always come back, addresses at least, so that a stack from a
	// process that exited before symbolization is still counted.
	frames := make([]event.Frame, len(addrs))
	for i, a := range addrs {
		frames[i].Addr = a
	}
	p := s.procs[pid]
	if p == nil {
		p = &proc{known: make(map[mapKey]*mapping), misses: make(map[uint64]struct{})}
		if err := s.refresh(pid, p); err != nil {
			return frames, nil, fmt.Errorf("symbolize pid %d: %w", pid, err)
		}
		s.procs[pid] = p
	}
	var news []event.Mapping
	reread := false
	for i, a := range addrs {
		m := p.find(a)
		if m == nil {
			if time.Since(p.readAt) > missTTL {
				clear(p.misses)
			}
			if _, missed := p.misses[a]; missed || reread {
				continue
			}
			// Not in any known mapping: a library dlopened since the last
			// read. Re-read once per call; the process may have exited,
			// then the old maps stand.
			reread = true
			if err := s.refresh(pid, p); err == nil {
				m = p.find(a)
			}
			if m == nil {
				if len(p.misses) >= maxMisses {
					clear(p.misses)
				}
				p.misses[a] = struct{}{}
				continue
			}
		}
		// Open before announcing: the Mapping record carries the build ID,
		// which pprof needs to match the mapping with symbols later.
		f := s.open(pid, m)
		frames[i].Mapping = m.id
		if !m.sent {
			m.sent = true
			news = append(news, m.record(pid))
		}
		if f == nil {
			continue
		}
		lookup := a
		if i > 0 && lookup > m.Start {
			lookup-- // a return address: the call is the byte before
		}
		v, ok := f.VirtualAddr(&m.MapEntry, lookup)
		if !ok {
			continue // page-alignment slack before the segment: not code
		}
		frames[i].Function, _ = f.FunctionAt(v)
		if !s.opts.NoLines {
			if file, line, ok := f.LineAt(v); ok {
				frames[i].File, frames[i].Line = file, line
			}
		}
	}
	return frames, news, nil
}

// Prepare reads the mappings of pid now, while it is alive, so that stacks
// read after it exits (a short-lived process whose records are still in the
// ring buffer) still resolve. The prober calls it whenever the process's
// link map changes. It returns an error when the maps cannot be read.
func (s *Symbolizer) Prepare(pid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.procs[pid]
	if p == nil {
		p = &proc{known: make(map[mapKey]*mapping), misses: make(map[uint64]struct{})}
	}
	if err := s.refresh(pid, p); err != nil {
		return fmt.Errorf("prepare pid %d: %w", pid, err)
	}
	s.procs[pid] = p
	return nil
}

// Inherit gives a forked child the mappings its parent has (a fork copies
// the address space), for a child that may exit before its own maps are
// read. A later Prepare or re-read replaces them with the child's own.
func (s *Symbolizer) Inherit(child, parent uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pp := s.procs[parent]
	if pp == nil {
		return
	}
	c := &proc{known: make(map[mapKey]*mapping), misses: make(map[uint64]struct{}), readAt: pp.readAt}
	for _, m := range pp.maps {
		s.nextID++
		cm := &mapping{MapEntry: m.MapEntry, id: s.nextID, opened: m.opened, file: m.file}
		c.known[mapKey{start: m.Start, offset: m.Offset, inode: m.Inode, path: m.Path}] = cm
		c.maps = append(c.maps, cm)
	}
	s.procs[child] = c
}

// Forget drops what is known of a process, after it exits. Files stay
// cached for other processes that map them.
func (s *Symbolizer) Forget(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.procs, pid)
}

// Close closes every cached file and returns the first error.
func (s *Symbolizer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for k, slot := range s.files {
		if slot.file != nil {
			if err := slot.file.Close(); err != nil && first == nil {
				first = err
			}
		}
		delete(s.files, k)
	}
	clear(s.procs)
	return first
}

// errExiting: a process's maps read empty while it exits.
var errExiting = errors.New("process exiting")

// refresh re-reads the executable mappings of pid, keeping the IDs (and
// sent marks) of mappings seen before. The read replaces what was known,
// unless the process is exiting: a read that straddles the teardown of its
// address space lists only some of its mappings (processExiting), and the
// stacks still waiting in the ring buffer lie in the others. The mappings
// read are then added to those known, and a known one is dropped only where
// a mapping read overlaps it.
func (s *Symbolizer) refresh(pid uint32, p *proc) error {
	entries, err := readMaps(s.opts.ProcRoot, int(pid))
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(entries, func(e MapEntry) bool { return e.Exec() }) {
		// A live process maps at least its executable: this one is
		// exiting (its address space is gone, the maps file reads
		// empty). The maps read before still hold for its stacks.
		return fmt.Errorf("pid %d maps no code: %w", pid, errExiting)
	}
	// After the read: an exit that began before its last page shows here.
	partial := processExiting(s.opts.ProcRoot, int(pid))
	maps := make([]*mapping, 0, len(p.maps))
	for _, e := range entries {
		// Code lies in executable mappings only; VirtualAddr relates them
		// to the file through its program headers, so the file's other
		// mappings are not needed here.
		if !e.Exec() {
			continue
		}
		k := mapKey{start: e.Start, offset: e.Offset, inode: e.Inode, path: e.Path}
		m := p.known[k]
		if m == nil {
			s.nextID++
			m = &mapping{MapEntry: e, id: s.nextID}
			p.known[k] = m
		}
		m.End = e.End // mremap can grow a mapping in place
		maps = append(maps, m)
	}
	slices.SortFunc(maps, func(a, b *mapping) int { return cmp.Compare(a.Start, b.Start) })
	if partial {
		read := len(maps)
		for _, old := range p.maps {
			if !overlaps(maps[:read], old) {
				maps = append(maps, old)
			}
		}
		slices.SortFunc(maps, func(a, b *mapping) int { return cmp.Compare(a.Start, b.Start) })
	}
	p.maps = maps
	clear(p.misses)
	p.readAt = time.Now()
	return nil
}

// overlaps reports whether m shares an address with any of maps, which are
// sorted by Start and disjoint.
func overlaps(maps []*mapping, m *mapping) bool {
	i, _ := slices.BinarySearchFunc(maps, m.Start, func(x *mapping, a uint64) int {
		if x.End <= a {
			return -1
		}
		return 1
	})
	return i < len(maps) && maps[i].Start < m.End
}

// find returns the executable mapping holding addr, or nil.
func (p *proc) find(addr uint64) *mapping {
	i, _ := slices.BinarySearchFunc(p.maps, addr, func(m *mapping, a uint64) int {
		switch {
		case m.End <= a:
			return -1
		case m.Start > a:
			return 1
		}
		return 0
	})
	if i < len(p.maps) && p.maps[i].Contains(addr) {
		return p.maps[i]
	}
	return nil
}

func (m *mapping) record(pid uint32) event.Mapping {
	rec := event.Mapping{ID: m.id, PID: pid, Start: m.Start, Limit: m.End, Offset: m.Offset, File: m.Path}
	if m.file != nil {
		rec.BuildID = m.file.BuildID()
	}
	return rec
}

// open returns the File behind m, opening it on first use through the
// process's own root (its container's files) or, for a deleted file,
// through /proc/PID/map_files.
func (s *Symbolizer) open(pid uint32, m *mapping) *File {
	if m.opened {
		return m.file
	}
	m.opened = true
	dir := filepath.Join(s.opts.ProcRoot, strconv.FormatUint(uint64(pid), 10))
	paths := []string{filepath.Join(dir, "root", m.Path)}
	mapFile := filepath.Join(dir, "map_files", strconv.FormatUint(m.Start, 16)+"-"+strconv.FormatUint(m.End, 16))
	if m.Deleted {
		paths = []string{mapFile}
	} else {
		// Last, the path in our own mount namespace: the process may have
		// exited (its /proc entries gone) before its stacks were read. Used
		// only when the inode shows it is the very file the process mapped.
		paths = append(paths, mapFile, m.Path)
	}
	for i, path := range paths {
		fi, err := os.Stat(path)
		if err != nil {
			continue
		}
		if i == len(paths)-1 && !m.Deleted {
			if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Ino != m.Inode {
				continue
			}
		}
		k := fileKey{dev: m.Dev, inode: m.Inode, mtime: fi.ModTime().UnixNano(), size: fi.Size(), path: m.Path}
		slot := s.files[k]
		if slot == nil {
			f, err := OpenFile(path)
			if err != nil && i < len(paths)-1 {
				// The process may have exited between the stat and the
				// open, taking /proc/PID/root and map_files with it: try
				// the next path rather than remember the file as
				// unreadable (every frame in it would stay unnamed).
				continue
			}
			slot = &fileSlot{file: f, err: err}
			s.files[k] = slot
		}
		m.file = slot.file
		return m.file
	}
	return nil
}
