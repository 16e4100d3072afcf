package symbolize

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

func mustSymbolizer(tb testing.TB, opts Options) *Symbolizer {
	tb.Helper()
	s := New(opts)
	tb.Cleanup(func() { assert.NoError(tb, s.Close()) })
	return s
}

// TestSymbolizeLive resolves addresses that running programs report about
// themselves, through the real /proc: a PIE and a fixed-address executable,
// and a shared library.
func TestSymbolizeLive(t *testing.T) {
	a := mustBuild(t)
	lineLeaf := markerLine(t, "prog.c", "LINE_LEAF")
	lineCall := markerLine(t, "prog.c", "LINE_CALL")
	lineFoo := markerLine(t, "libfoo.c", "LINE_FOO")
	for _, prog := range []string{"prog-pie", "prog-nopie"} {
		t.Run(prog, func(t *testing.T) {
			tg := mustStart(t, a.path(prog))
			s := mustSymbolizer(t, Options{})

			// leaf's entry (element 0) and the return address into caller.
			frames, maps, err := s.Symbolize(tg.pid, []uint64{tg.leaf, tg.ret, 0x10})
			require.NoError(t, err)
			require.Len(t, frames, 3)
			require.Len(t, maps, 1, "one mapping: the program's code")
			m := maps[0]
			assert.Equal(t, a.path(prog), m.File)
			assert.Equal(t, readelfBuildID(t, a.path(prog)), m.BuildID)
			assert.Equal(t, tg.pid, m.PID)
			assert.True(t, m.Start <= tg.leaf && tg.leaf < m.Limit)
			assertFrame(t, event.Frame{Addr: tg.leaf, Mapping: m.ID, Function: "leaf", File: "prog.c", Line: lineLeaf}, frames[0])
			assertFrame(t, event.Frame{Addr: tg.ret, Mapping: m.ID, Function: "caller", File: "prog.c", Line: lineCall}, frames[1])
			assert.Equal(t, event.Frame{Addr: 0x10}, frames[2], "an address in no mapping")

			// A library: a new mapping, announced once.
			frames, maps, err = s.Symbolize(tg.pid, []uint64{tg.foo})
			require.NoError(t, err)
			require.Len(t, maps, 1)
			assert.Equal(t, a.path("libfoo.so"), maps[0].File)
			assert.Equal(t, readelfBuildID(t, a.path("libfoo.so")), maps[0].BuildID)
			assert.NotEqual(t, m.ID, maps[0].ID)
			assertFrame(t, event.Frame{Addr: tg.foo, Mapping: maps[0].ID, Function: "foo", File: "libfoo.c", Line: lineFoo}, frames[0])

			again, maps, err := s.Symbolize(tg.pid, []uint64{tg.leaf, tg.ret, tg.foo - 1})
			require.NoError(t, err)
			assert.Empty(t, maps, "mappings are returned once")
			assert.Equal(t, m.ID, again[0].Mapping, "mapping IDs are stable")

			// After Forget the process is new to the Symbolizer.
			s.Forget(tg.pid)
			_, maps, err = s.Symbolize(tg.pid, []uint64{tg.leaf})
			require.NoError(t, err)
			assert.Len(t, maps, 1)
		})
	}
}

func assertFrame(tb testing.TB, want, got event.Frame) {
	tb.Helper()
	got.File = filepath.Base(got.File)
	assert.Equal(tb, want, got)
}

func TestSymbolizeNoProcess(t *testing.T) {
	s := mustSymbolizer(t, Options{ProcRoot: t.TempDir()})
	frames, maps, err := s.Symbolize(99, []uint64{1, 2})
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Equal(t, []event.Frame{{Addr: 1}, {Addr: 2}}, frames, "addresses kept")
	assert.Empty(t, maps)
}

// fakeProc lays out a procfs for one made-up process whose files are the
// real ones (root links to /), so the maps can say anything.
type fakeProc struct {
	root string
	pid  uint32
}

func newFakeProc(tb testing.TB) fakeProc {
	tb.Helper()
	p := fakeProc{root: tb.TempDir(), pid: 4242}
	dir := filepath.Join(p.root, strconv.Itoa(int(p.pid)))
	require.NoError(tb, os.MkdirAll(filepath.Join(dir, "map_files"), 0o755))
	require.NoError(tb, os.Symlink("/", filepath.Join(dir, "root")))
	p.setTask(tb, p.pid, 'S', 0) // a live process: its maps are whole
	return p
}

// setTask writes the stat file of thread tid of the process (the process's
// own for tid == pid) with the given state and flags (PF_* bits).
func (p fakeProc) setTask(tb testing.TB, tid uint32, state byte, flags uint64) {
	tb.Helper()
	dir := filepath.Join(p.root, strconv.Itoa(int(p.pid)))
	// Fields 1 to 9: pid, comm (spaces and parentheses allowed), state,
	// ppid, pgrp, session, tty_nr, tpgid, flags; then the rest.
	line := fmt.Sprintf("%d (a (b) c) %c 1 %d %d 0 -1 %d 0 0 0 0 0 0\n", tid, state, p.pid, p.pid, flags)
	task := filepath.Join(dir, "task", strconv.Itoa(int(tid)))
	require.NoError(tb, os.MkdirAll(task, 0o755))
	require.NoError(tb, os.WriteFile(filepath.Join(task, "stat"), []byte(line), 0o644))
	if tid == p.pid {
		require.NoError(tb, os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644))
	}
}

func (p fakeProc) setMaps(tb testing.TB, lines ...string) {
	tb.Helper()
	var b []byte
	for _, l := range lines {
		b = append(b, l+"\n"...)
	}
	require.NoError(tb, os.WriteFile(filepath.Join(p.root, strconv.Itoa(int(p.pid)), "maps"), b, 0o644))
}

// libLoad places the executable segment of the ELF file at path at base the
// way the dynamic loader would, returning its maps line (naming the file
// mappedAs) and range.
func libLoad(tb testing.TB, path, mappedAs string, base uint64) (line string, start, end uint64) {
	tb.Helper()
	ef, err := elf.Open(path)
	require.NoError(tb, err)
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			start = base + p.Vaddr&^0xfff
			end = base + (p.Vaddr+p.Memsz+0xfff)&^0xfff
			return fmt.Sprintf("%x-%x r-xp %08x 08:01 1234 %s", start, end, p.Off&^0xfff, mappedAs), start, end
		}
	}
	tb.Fatalf("no executable segment in %s", path)
	return "", 0, 0
}

// TestSymbolizeDlopen: a library mapped after the first look at the process
// is found by re-reading its maps.
func TestSymbolizeDlopen(t *testing.T) {
	a := mustBuild(t)
	lib := a.path("libfoo.so")
	foo, ok := mustOpen(t, lib).Lookup("foo")
	require.True(t, ok)
	p := newFakeProc(t)
	const base = 0x7f00_0000_0000
	libLine, _, _ := libLoad(t, lib, lib, base)
	progLine, progStart, _ := libLoad(t, a.path("prog-pie"), a.path("prog-pie"), 0x5555_0000_0000)
	p.setMaps(t, progLine)

	s := mustSymbolizer(t, Options{ProcRoot: p.root})
	_, maps, err := s.Symbolize(p.pid, []uint64{progStart})
	require.NoError(t, err)
	require.Len(t, maps, 1)

	p.setMaps(t, progLine, libLine) // dlopen
	frames, maps, err := s.Symbolize(p.pid, []uint64{base + foo.Value, progStart + 1})
	require.NoError(t, err)
	require.Len(t, maps, 1, "only the new mapping")
	assert.Equal(t, lib, maps[0].File)
	assert.Equal(t, "foo", frames[0].Function)
	assert.Equal(t, maps[0].ID, frames[0].Mapping)
}

// TestSymbolizeMisses: an address in no mapping is remembered for a while,
// sparing a maps read per stack, then tried again.
func TestSymbolizeMisses(t *testing.T) {
	a := mustBuild(t)
	lib := a.path("libfoo.so")
	foo, ok := mustOpen(t, lib).Lookup("foo")
	require.True(t, ok)
	p := newFakeProc(t)
	const base = 0x7f00_0000_0000
	libLine, _, _ := libLoad(t, lib, lib, base)
	progLine, _, _ := libLoad(t, a.path("prog-pie"), a.path("prog-pie"), 0x5555_0000_0000)
	p.setMaps(t, progLine)
	s := mustSymbolizer(t, Options{ProcRoot: p.root})

	frames, _, err := s.Symbolize(p.pid, []uint64{base + foo.Value})
	require.NoError(t, err)
	assert.Empty(t, frames[0].Function)
	p.setMaps(t, progLine, libLine) // the region was unmapped and a library mapped there
	frames, _, err = s.Symbolize(p.pid, []uint64{base + foo.Value})
	require.NoError(t, err)
	assert.Empty(t, frames[0].Function, "the miss is trusted for missTTL")

	defer func(ttl time.Duration) { missTTL = ttl }(missTTL)
	missTTL = 0
	frames, _, err = s.Symbolize(p.pid, []uint64{base + foo.Value})
	require.NoError(t, err)
	assert.Equal(t, "foo", frames[0].Function, "then it expires")
}

// TestSymbolizeExiting: an exiting process's maps read empty; the maps read
// before still symbolize its last stacks, even when an address in no
// mapping (a broken frame-pointer chain) asks for a fresh read.
func TestSymbolizeExiting(t *testing.T) {
	a := mustBuild(t)
	lib := a.path("libfoo.so")
	foo, ok := mustOpen(t, lib).Lookup("foo")
	require.True(t, ok)
	p := newFakeProc(t)
	const base = 0x7f00_0000_0000
	libLine, _, _ := libLoad(t, lib, lib, base)
	progLine, _, _ := libLoad(t, a.path("prog-pie"), a.path("prog-pie"), 0x5555_0000_0000)
	p.setMaps(t, progLine, libLine)
	s := mustSymbolizer(t, Options{ProcRoot: p.root})
	frames, _, err := s.Symbolize(p.pid, []uint64{base + foo.Value})
	require.NoError(t, err)
	require.Equal(t, "foo", frames[0].Function)

	p.setMaps(t) // exit_mm: the address space is gone
	for range 2 {
		frames, _, err = s.Symbolize(p.pid, []uint64{base + foo.Value, 0x7ffd_0000_1000})
		require.NoError(t, err)
		assert.Equal(t, "foo", frames[0].Function)
		assert.Zero(t, frames[1].Mapping)
	}
}

// TestSymbolizeExitingPartial: a maps read that straddles the teardown of
// an exiting process's address space lists only the first mappings (the
// kernel takes the address-space lock again for each read of the file).
// The mappings it lacks still symbolize the stacks waiting in the ring
// buffer; a live process's read is whole, and what it lacks was unmapped.
func TestSymbolizeExitingPartial(t *testing.T) {
	a := mustBuild(t)
	lib := a.path("libfoo.so")
	foo, ok := mustOpen(t, lib).Lookup("foo")
	require.True(t, ok)
	const base = 0x7f00_0000_0000
	libLine, _, _ := libLoad(t, lib, lib, base)
	progLine, progStart, _ := libLoad(t, a.path("prog-pie"), a.path("prog-pie"), 0x5555_0000_0000)
	const pfExiting = 0x4 // PF_EXITING, include/linux/sched.h
	for _, tc := range []struct {
		name   string
		exit   func(p fakeProc) // the process's state at the second read
		lookup string           // foo's frame after it
	}{
		{name: "exit_group", lookup: "foo", exit: func(p fakeProc) {
			p.setTask(t, p.pid, 'R', pfExiting)
			p.setTask(t, p.pid+1, 'R', pfExiting)
		}},
		{name: "zombie leader, last thread exiting", lookup: "foo", exit: func(p fakeProc) {
			p.setTask(t, p.pid, 'Z', pfExiting)
			p.setTask(t, p.pid+1, 'R', pfExiting)
		}},
		{name: "reaped after the read", lookup: "foo", exit: func(p fakeProc) {
			dir := filepath.Join(p.root, strconv.Itoa(int(p.pid)))
			require.NoError(t, os.Remove(filepath.Join(dir, "stat")))
			require.NoError(t, os.RemoveAll(filepath.Join(dir, "task")))
		}},
		// Live reads are whole: the library was unmapped (dlclose).
		{name: "live", lookup: "", exit: func(fakeProc) {}},
		{name: "main thread exited, another runs", lookup: "", exit: func(p fakeProc) {
			p.setTask(t, p.pid, 'Z', pfExiting)
			p.setTask(t, p.pid+1, 'S', 0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakeProc(t)
			p.setTask(t, p.pid+1, 'S', 0)
			p.setMaps(t, progLine, libLine)
			s := mustSymbolizer(t, Options{ProcRoot: p.root})
			require.NoError(t, s.Prepare(p.pid))

			// The second read (the session's Prepare at the process's last
			// library load, read late) shows the executable only.
			tc.exit(p)
			p.setMaps(t, progLine)
			require.NoError(t, s.Prepare(p.pid))
			frames, _, err := s.Symbolize(p.pid, []uint64{base + foo.Value, progStart + 1})
			require.NoError(t, err)
			assert.Equal(t, tc.lookup, frames[0].Function)
			assert.Equal(t, tc.lookup != "", frames[0].Mapping != 0, "foo's frame has a mapping")
			assert.NotZero(t, frames[1].Mapping, "the executable, in both reads")
		})
	}
}

// TestSymbolizeInherit: a forked child that exited before its maps were
// read symbolizes with its parent's, under its own mapping IDs.
func TestSymbolizeInherit(t *testing.T) {
	a := mustBuild(t)
	lib := a.path("libfoo.so")
	foo, ok := mustOpen(t, lib).Lookup("foo")
	require.True(t, ok)
	p := newFakeProc(t)
	const base = 0x7f00_0000_0000
	libLine, _, _ := libLoad(t, lib, lib, base)
	progLine, _, _ := libLoad(t, a.path("prog-pie"), a.path("prog-pie"), 0x5555_0000_0000)
	p.setMaps(t, progLine, libLine)
	s := mustSymbolizer(t, Options{ProcRoot: p.root})
	require.NoError(t, s.Prepare(p.pid))
	parentFrames, parentMaps, err := s.Symbolize(p.pid, []uint64{base + foo.Value})
	require.NoError(t, err)
	require.Len(t, parentMaps, 1)

	child := p.pid + 1 // no /proc entry: gone already
	_, _, err = s.Symbolize(child, []uint64{base + foo.Value})
	require.Error(t, err, "without inheriting, the child's maps are unknown")
	s.Forget(child)
	s.Inherit(child, p.pid)
	frames, maps, err := s.Symbolize(child, []uint64{base + foo.Value})
	require.NoError(t, err)
	assert.Equal(t, "foo", frames[0].Function)
	require.Len(t, maps, 1, "the child's own Mapping record")
	assert.NotEqual(t, parentFrames[0].Mapping, frames[0].Mapping)
	assert.Equal(t, child, maps[0].PID)
}

// TestSymbolizeReturnAddress: a return address just past a function's last
// byte (a call that ends it, to a noreturn function) belongs to that
// function; the same address as a leaf belongs to the next one.
func TestSymbolizeReturnAddress(t *testing.T) {
	a := mustBuild(t)
	lib := a.path("libfoo.so")
	foo, ok := mustOpen(t, lib).Lookup("foo")
	require.True(t, ok)
	p := newFakeProc(t)
	const base = 0x7f00_0000_0000
	line, _, _ := libLoad(t, lib, lib, base)
	p.setMaps(t, line)
	s := mustSymbolizer(t, Options{ProcRoot: p.root, NoLines: true})
	after := base + foo.Value + foo.Size // the byte after foo
	frames, _, err := s.Symbolize(p.pid, []uint64{after, after})
	require.NoError(t, err)
	assert.Equal(t, "bare", frames[0].Function, "a leaf entry is looked up as is")
	assert.Equal(t, "foo", frames[1].Function, "a return address is looked up one byte earlier")
	assert.Equal(t, after, frames[1].Addr, "the frame keeps the original address")
	assert.Empty(t, frames[1].File, "NoLines")
}

// TestSymbolizeDeleted: a file replaced on disk after it was mapped is read
// through /proc/PID/map_files.
func TestSymbolizeDeleted(t *testing.T) {
	a := mustBuild(t)
	lib := a.path("libfoo.so")
	foo, ok := mustOpen(t, lib).Lookup("foo")
	require.True(t, ok)
	p := newFakeProc(t)
	const base = 0x7f00_0000_0000
	gone := filepath.Join(t.TempDir(), "gone.so") // never exists
	line, start, end := libLoad(t, lib, gone+" (deleted)", base)
	p.setMaps(t, line)
	require.NoError(t, os.Symlink(lib, filepath.Join(p.root, "4242", "map_files", fmt.Sprintf("%x-%x", start, end))))

	s := mustSymbolizer(t, Options{ProcRoot: p.root})
	frames, maps, err := s.Symbolize(p.pid, []uint64{base + foo.Value})
	require.NoError(t, err)
	require.Len(t, maps, 1)
	assert.Equal(t, gone, maps[0].File)
	assert.Equal(t, "foo", frames[0].Function)
}

// TestSymbolizeConcurrent runs callers in parallel; run with -race.
func TestSymbolizeConcurrent(t *testing.T) {
	a := mustBuild(t)
	lib := a.path("libfoo.so")
	foo, ok := mustOpen(t, lib).Lookup("foo")
	require.True(t, ok)
	p := newFakeProc(t)
	const base = 0x7f00_0000_0000
	line, _, _ := libLoad(t, lib, lib, base)
	p.setMaps(t, line)
	s := mustSymbolizer(t, Options{ProcRoot: p.root})

	var wg sync.WaitGroup
	var mu sync.Mutex
	announced := 0
	for range 8 {
		wg.Go(func() {
			for range 50 {
				frames, maps, err := s.Symbolize(p.pid, []uint64{base + foo.Value})
				assert.NoError(t, err)
				assert.Equal(t, "foo", frames[0].Function)
				mu.Lock()
				announced += len(maps)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 1, announced, "the mapping is returned to exactly one caller")
}

// TestSymbolizeOpenFails: a path that stats but does not open (the process
// exited between the two: /proc/PID/root/... is gone) falls through to the
// next way to the file; before, the failure was kept and every frame in the
// file stayed unnamed (seen as all-hex stacks of short-lived programs).
func TestSymbolizeOpenFails(t *testing.T) {
	a := mustBuild(t)
	lib := a.path("libfoo.so")
	foo, ok := mustOpen(t, lib).Lookup("foo")
	require.True(t, ok)
	p := newFakeProc(t)
	const base = 0x7f00_0000_0000
	line, start, end := libLoad(t, lib, lib, base)
	p.setMaps(t, line)
	// /proc/PID/root/<lib> stats (a directory here) but cannot be read as
	// ELF; map_files has the file.
	root := filepath.Join(p.root, "4242", "root")
	require.NoError(t, os.Remove(root))
	require.NoError(t, os.MkdirAll(filepath.Join(root, lib), 0o755))
	require.NoError(t, os.Symlink(lib, filepath.Join(p.root, "4242", "map_files", fmt.Sprintf("%x-%x", start, end))))

	s := mustSymbolizer(t, Options{ProcRoot: p.root})
	frames, _, err := s.Symbolize(p.pid, []uint64{base + foo.Value})
	require.NoError(t, err)
	assert.Equal(t, "foo", frames[0].Function)
}
