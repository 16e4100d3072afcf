//go:build linux

package probes

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/symbolize"
)

// pytest's phases.
//
// pytest announces the test it runs in the environment: before each phase
// of a test it sets PYTEST_CURRENT_TEST to "<nodeid> (setup|call|teardown)"
// through os.environ (CPython's posix.putenv calls libc's setenv), and it
// removes the variable after the teardown (unsetenv). So a CPython's libc
// gets pytest_setenv and pytest_unsetenv (bpf/vramprof.bpf.c), which send
// REC_TEST_PHASE records for that name only, from targets only; the
// session turns them into event.TestPhase records, written in effect order
// with the events (see bufferPhase), so that report/pytests charges every
// allocation to the test that ran when it was made.
//
// libc is not one of the files discovery probes (scanFile, known_files):
// probing it there would stop every process that maps it at its loader's
// rendezvous. It is probed here, once per file (device and inode), when a
// session finds a CPython in a process: the uprobes live on the inode, so
// one pair serves every process that maps that libc, and the BPF filter
// keeps the others out.

// pytestFunctions are the libc functions probed, in the order of their
// programs in attachPytest.
var pytestFunctions = [...]string{"setenv", "unsetenv"}

// isLibc reports whether a mapped file is a C library that defines setenv
// and unsetenv: glibc's libc.so.6 (libc-2.NN.so before 2.34) or musl's,
// which is its own dynamic loader.
func isLibc(file string) bool {
	base := path.Base(file)
	return base == "libc.so.6" || strings.HasPrefix(base, "libc-") && strings.HasSuffix(base, ".so") ||
		strings.HasPrefix(base, "ld-musl-") || strings.HasPrefix(base, "libc.musl-")
}

// probePytest attaches pytest_setenv and pytest_unsetenv to the libc p
// maps, once p has a CPython, unless that file is probed already. A libc
// not mapped yet (a process stopped at its exec) is looked for again at
// the next scan; one that cannot be probed is said once in a note, and
// the tests of that process are found from their frames (report/pytests).
func (s *Session) probePytest(p *proc) error {
	if p.py == nil || p.pytest {
		return nil
	}
	maps, err := symbolize.ReadMaps(int(p.pid))
	if err != nil {
		return nil // gone meanwhile: its exit is noticed elsewhere
	}
	for _, c := range candidates(int(p.pid), maps) {
		if !isLibc(c.Path) {
			continue
		}
		p.pytest = true
		if err := s.loader.att.attachPytest(c); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				p.pytest = false // gone (the process exited): maybe next time
				return nil
			}
			if s.opts.Note != nil {
				s.opts.Note(fmt.Sprintf("pid %d: pytest's phases are not seen (%v): its tests are found from their frames", p.pid, err))
			}
		}
		return nil
	}
	return nil
}

// attachPytest places pytest_setenv and pytest_unsetenv at the entries of
// setenv and unsetenv in libc c, both or neither, once per file.
func (a *attacher) attachPytest(c candidate) error {
	if a.pytest[c.Key] {
		return nil
	}
	ex, err := link.OpenExecutable(c.OpenPath)
	if err != nil {
		return fmt.Errorf("open %s for uprobes: %w", c.Path, err)
	}
	progs := [...]*ebpf.Program{a.objs.PytestSetenv, a.objs.PytestUnsetenv}
	var placed []link.Link
	for i, fn := range pytestFunctions {
		l, err := ex.Uprobe(fn, progs[i], &link.UprobeOptions{PID: a.pid})
		if err != nil {
			for _, l := range placed {
				_ = l.Close()
			}
			return fmt.Errorf("attach uprobe %s in %s: %w", fn, c.Path, wrapPerm(err))
		}
		placed = append(placed, l)
	}
	a.links = append(a.links, placed...)
	if a.pytest == nil {
		a.pytest = make(map[fileKey]bool)
	}
	a.pytest[c.Key] = true
	return nil
}

// testPhase turns a REC_TEST_PHASE record into its TestPhase: the value
// is the first ev.Device bytes of the record's stack.
func testPhase(r *rawRecord) (*event.TestPhase, error) {
	n := int(r.ev.Device)
	if n < 0 || n > len(r.stack) {
		return nil, fmt.Errorf("%w: a test phase of %d bytes in %d", errShortRecord, n, len(r.stack))
	}
	id, phase := event.ParseTestPhase(string(r.stack[:n]))
	return &event.TestPhase{Time: r.ev.Time, PID: r.ev.PID, TID: r.ev.TID, NodeID: id, Phase: phase}, nil
}

// bufferPhase keeps a TestPhase until the events that took effect before it
// are written: events wait in the reorder buffer (reorder.go), and a phase
// written at once would come before some of them. release writes it before
// the first event after it, or once its time is due as an event's would be.
func (s *Session) bufferPhase(tp *event.TestPhase) {
	s.phases = append(s.phases, tp)
}

// writePhases writes the buffered phases while before says their time is
// due, in the order they came (a process's own are in time order: one
// thread sets the variable, and its records reach the ring in order).
func (s *Session) writePhases(before func(t uint64) bool) error {
	n := 0
	for n < len(s.phases) && before(s.phases[n].Time) {
		if err := s.opts.Sink.Write(s.phases[n]); err != nil {
			return fmt.Errorf("write test phase: %w", err)
		}
		n++
	}
	s.phases = s.phases[n:]
	if len(s.phases) == 0 {
		s.phases = nil
	}
	return nil
}
