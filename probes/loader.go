//go:build linux

package probes

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
)

// loader owns a session's kernel resources: the BPF objects, the two ring
// buffer readers (events, and py_new, the Python code objects' fast lane),
// the uprobe links (attacher), the guardian of the processes the BPF side
// stops, and the tracepoints that follow targets' forks, execs and exits.
// close releases them in reverse order. Not safe for concurrent use, except
// that one goroutine per reader may read it until close.
type loader struct {
	objs   bpfObjects
	ring   *ringbuf.Reader // events: read by the session's Run
	pyRing *ringbuf.Reader // py_new: read by the prefetch goroutine
	// readers are the goroutines reading pyRing; close waits for them
	// once the ring is closed.
	readers sync.WaitGroup
	att     *attacher
	// epoch is bumped after a process leaves targets or its py_procs
	// entry changes (see filterEpoch).
	epoch *filterEpoch
	// lifeLinks follow targets' forks, execs and exits (tp_btf).
	lifeLinks []link.Link
	// guard resumes what the BPF side stopped if this process dies.
	guard *guardian
	// spec is the collection the objects came from: loadLate loads the
	// programs newLoader leaves out from it, sharing objs' maps.
	spec *ebpf.CollectionSpec
	// data are the global variables' maps, shared with the late programs.
	data dataSections
}

// earlyObjects are the BPF objects newLoader loads: every map, and the
// programs any session attaches at once or with its first target
// (lifecycle tracepoints, the file fault watch, the loader probe, the CUDA
// calls as uprobe_multi links, pytest's phases). The rest are loaded on
// first use (loadLate): the verifier spends most of a session's start-up
// on call_enter (the fallback for kernels without uprobe_multi, the same
// code as call_enter_multi), spec_enter and usdt_block, which a process
// without framework allocators never needs.
type earlyObjects struct {
	bpfMaps
	bpfVariables
	dataSections
	earlyPrograms
}

// earlyPrograms are earlyObjects' programs.
type earlyPrograms struct {
	CallEnterMulti  *ebpf.Program `ebpf:"call_enter_multi"`
	CallReturnMulti *ebpf.Program `ebpf:"call_return_multi"`
	LoaderState     *ebpf.Program `ebpf:"loader_state"`
	MapFault        *ebpf.Program `ebpf:"map_fault"`
	MapPages        *ebpf.Program `ebpf:"map_pages"`
	ProcessExec     *ebpf.Program `ebpf:"process_exec"`
	ProcessExit     *ebpf.Program `ebpf:"process_exit"`
	ProcessFork     *ebpf.Program `ebpf:"process_fork"`
	PytestSetenv    *ebpf.Program `ebpf:"pytest_setenv"`
	PytestUnsetenv  *ebpf.Program `ebpf:"pytest_unsetenv"`
}

// dataSections are the maps holding the BPF side's global variables
// (bpfVariables), which late programs must share with the early ones.
type dataSections struct {
	Bss    *ebpf.Map `ebpf:".bss"`
	Rodata *ebpf.Map `ebpf:".rodata"`
}

// loadLate loads the programs named (ones newLoader left out, see
// earlyObjects) with the session's maps, and stores each in objs under its
// name: all of them, or none and an error. The verifier, most of the time
// this takes, runs for each in parallel.
func (l *loader) loadLate(names ...string) error {
	maps := make(map[string]*ebpf.Map)
	taggedMaps(reflect.ValueOf(&l.objs.bpfMaps).Elem(), maps)
	taggedMaps(reflect.ValueOf(&l.data).Elem(), maps)
	for name := range l.spec.Maps {
		if maps[name] == nil {
			// A new map in the C code that bpfMaps lacks: the late
			// programs would get their own, empty copy of it.
			return fmt.Errorf("load BPF programs %v: map %s of the collection is not loaded", names, name)
		}
	}
	progs := make([]*ebpf.Program, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			progs[i], errs[i] = l.loadOne(name, maps)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, p := range progs {
			_ = p.Close()
		}
		return err
	}
	objs := reflect.ValueOf(&l.objs.bpfPrograms).Elem()
	for i, name := range names {
		for f := range objs.NumField() {
			if objs.Type().Field(f).Tag.Get("ebpf") == name {
				objs.Field(f).Set(reflect.ValueOf(progs[i]))
			}
		}
	}
	return nil
}

// loadOne loads the program name of l.spec, its maps replaced by maps.
func (l *loader) loadOne(name string, maps map[string]*ebpf.Map) (*ebpf.Program, error) {
	spec := l.spec.Copy()
	ps := spec.Programs[name]
	if ps == nil {
		return nil, fmt.Errorf("load BPF program %s: not in the collection", name)
	}
	spec.Programs = map[string]*ebpf.ProgramSpec{name: ps}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: maps})
	if err != nil {
		if isPermission(err) {
			return nil, fmt.Errorf("load BPF program %s: %w: %w", name, ErrNotPermitted, err)
		}
		return nil, fmt.Errorf("load BPF program %s: %w", name, err)
	}
	defer coll.Close() // its clones of the maps
	return coll.DetachProgram(name), nil
}

// taggedMaps adds the maps of struct v (fields tagged `ebpf:"name"`, as
// bpf2go and LoadAndAssign use them) to out by name.
func taggedMaps(v reflect.Value, out map[string]*ebpf.Map) {
	for i := range v.NumField() {
		if m, ok := v.Field(i).Interface().(*ebpf.Map); ok && m != nil {
			out[v.Type().Field(i).Tag.Get("ebpf")] = m
		}
	}
}

// newLoader loads the BPF objects sized and set as opts says, opens both
// ring buffers, starts the guardian and attaches the lifecycle
// tracepoints; no process is probed yet. On error, what was made is
// released again.
func newLoader(opts *Options) (*loader, error) {
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
	if err := spec.Variables[bpfVarSelfTgid].Set(uint32(os.Getpid())); err != nil {
		return nil, fmt.Errorf("set self_tgid: %w", err)
	}
	l := &loader{spec: spec}
	var early earlyObjects
	if err := spec.LoadAndAssign(&early, nil); err != nil {
		if isPermission(err) {
			return nil, fmt.Errorf("load BPF programs: %w: %w", ErrNotPermitted, err)
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("load BPF programs: %w: %w", ErrNoBPF, err)
		}
		return nil, fmt.Errorf("load BPF programs: %w", err)
	}
	l.objs.bpfMaps = early.bpfMaps
	l.objs.bpfVariables = early.bpfVariables
	l.data = early.dataSections
	p, e := &l.objs.bpfPrograms, &early.earlyPrograms
	p.CallEnterMulti, p.CallReturnMulti, p.LoaderState = e.CallEnterMulti, e.CallReturnMulti, e.LoaderState
	p.MapFault, p.MapPages = e.MapFault, e.MapPages
	p.ProcessExec, p.ProcessExit, p.ProcessFork = e.ProcessExec, e.ProcessExit, e.ProcessFork
	p.PytestSetenv, p.PytestUnsetenv = e.PytestSetenv, e.PytestUnsetenv
	if l.epoch, err = newFilterEpoch(l.objs.UserEpoch); err != nil {
		_ = l.closeObjs()
		return nil, fmt.Errorf("load BPF programs: %w: %w", ErrNoBPF, err)
	}
	l.ring, err = ringbuf.NewReader(l.objs.Events)
	if err != nil {
		_ = l.closeObjs()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	l.pyRing, err = ringbuf.NewReader(l.objs.PyNew)
	if err != nil {
		_ = l.ring.Close()
		_ = l.closeObjs()
		return nil, fmt.Errorf("open python ring buffer: %w", err)
	}
	l.att = newAttacher(&l.objs, l.loadLate, 0)
	// Before the first probe that can stop a process.
	if l.guard, err = startGuardian(l.objs.Stopped); err != nil {
		_ = l.close()
		return nil, err
	}
	// Children of targets are targets (the fork tracepoint adds them in the
	// kernel before they run); an exec is a new image to probe; an exit
	// ends a process before its PID can be reused.
	for _, prog := range []*ebpf.Program{l.objs.ProcessFork, l.objs.ProcessExec, l.objs.ProcessExit} {
		tl, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			_ = l.close()
			return nil, fmt.Errorf("attach %s tracepoint: %w", prog, wrapPerm(err))
		}
		l.lifeLinks = append(l.lifeLinks, tl)
	}
	return l, nil
}

// close removes every probe, resumes the targets the loader and exec probes
// stopped and the session has not resumed yet (and no other process: one
// the user stopped stays stopped), ends the guardian, closes the readers
// and waits for the goroutines reading them, and unloads the BPF objects,
// in that order. It returns the first error.
func (l *loader) close() error {
	var errs []error
	for i := len(l.lifeLinks) - 1; i >= 0; i-- {
		errs = append(errs, l.lifeLinks[i].Close())
	}
	if l.att != nil {
		errs = append(errs, l.att.Close())
	}
	// A target stopped at a dlopen waits for us: never leave it stopped.
	// With the probes gone, no process is stopped after this.
	if l.objs.Stopped != nil {
		resumeStopped(l.objs.Stopped, os.Getpid())
	}
	if l.guard != nil {
		errs = append(errs, l.guard.close())
	}
	if l.ring != nil {
		if err := l.ring.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close ring buffer: %w", err))
		}
	}
	if l.pyRing != nil {
		err := l.pyRing.Close()
		l.readers.Wait()
		if err != nil {
			errs = append(errs, fmt.Errorf("close python ring buffer: %w", err))
		}
	}
	if err := l.closeObjs(); err != nil {
		errs = append(errs, fmt.Errorf("unload BPF objects: %w", err))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// closeObjs unloads the BPF objects, late programs included.
func (l *loader) closeObjs() error {
	return errors.Join(l.objs.Close(), l.data.Bss.Close(), l.data.Rodata.Close())
}
