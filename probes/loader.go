//go:build linux

package probes

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
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
	// spec is the collection the objects came from: the programs left out
	// of earlyObjects are loaded from it (lateLoad), sharing objs' maps.
	spec *ebpf.CollectionSpec
	// data are the global variables' maps, shared with the late programs.
	data dataSections
	// late are the loads of the programs left out of earlyObjects.
	late []*lateLoad
}

// earlyObjects are the BPF objects newLoader loads before it returns:
// every map, and the programs NewSession attaches or may attach before a
// target is probed (lifecycle tracepoints, the file fault watch, the
// loader probe, pytest's phases). The verifier spends most of a session's
// start-up on the others (call_enter_multi 69k processed instructions,
// spec_enter 48k, usdt_block 33k, call_enter as much as call_enter_multi):
// those are loaded in the background meanwhile, or on first use
// (lateLoad).
type earlyObjects struct {
	bpfMaps
	bpfVariables
	dataSections
	earlyPrograms
}

// earlyPrograms are earlyObjects' programs.
type earlyPrograms struct {
	LoaderState    *ebpf.Program `ebpf:"loader_state"`
	MapFault       *ebpf.Program `ebpf:"map_fault"`
	MapPages       *ebpf.Program `ebpf:"map_pages"`
	ProcessExec    *ebpf.Program `ebpf:"process_exec"`
	ProcessExit    *ebpf.Program `ebpf:"process_exit"`
	ProcessFork    *ebpf.Program `ebpf:"process_fork"`
	PytestSetenv   *ebpf.Program `ebpf:"pytest_setenv"`
	PytestUnsetenv *ebpf.Program `ebpf:"pytest_unsetenv"`
}

// backgroundPrograms are loaded by newLoader's goroutine, group after
// group, each group as one collection: first what every CUDA
// process needs, then the block layer's (USDT sites, allocator specs),
// which preload may need for a library before the target maps it.
// call_enter and call_return, for kernels without uprobe_multi, are
// loaded only when a link fails for that reason.
var backgroundPrograms = [][]string{
	{"call_enter_multi", "call_return_multi"},
	{"spec_enter", "spec_return", "usdt_block"},
}

// dataSections are the maps holding the BPF side's global variables
// (bpfVariables), which late programs must share with the early ones.
type dataSections struct {
	Bss    *ebpf.Map `ebpf:".bss"`
	Rodata *ebpf.Map `ebpf:".rodata"`
}

// lateLoad is a group of programs loaded apart from earlyObjects, with
// the session's maps. Its goroutine sets progs or err, then closes done;
// after that, only the loader's owner reads or changes it.
type lateLoad struct {
	names []string
	done  chan struct{}
	progs []*ebpf.Program
	err   error
	// taken: progs are in objs (loader.need), and close with them.
	taken bool
}

// startLate starts one goroutine loading groups of programs one after
// another, and returns their lateLoads, in that order.
func (l *loader) startLate(groups ...[]string) ([]*lateLoad, error) {
	maps := make(map[string]*ebpf.Map)
	taggedMaps(reflect.ValueOf(&l.objs.bpfMaps).Elem(), maps)
	taggedMaps(reflect.ValueOf(&l.data).Elem(), maps)
	for name := range l.spec.Maps {
		if maps[name] == nil {
			// A map in the C code that bpfMaps lacks: the late programs
			// would each get their own, empty copy of it.
			return nil, fmt.Errorf("load BPF programs: map %s of the collection is not loaded", name)
		}
	}
	var loads []*lateLoad
	for _, names := range groups {
		loads = append(loads, &lateLoad{names: names, done: make(chan struct{})})
	}
	l.late = append(l.late, loads...)
	go func() {
		for _, ll := range loads {
			ll.progs, ll.err = l.loadGroup(ll.names, maps)
			close(ll.done)
		}
	}()
	return loads, nil
}

// loadGroup loads the programs named as one collection (one copy of the
// spec, one BTF load): all of them, or none and an error.
func (l *loader) loadGroup(names []string, maps map[string]*ebpf.Map) ([]*ebpf.Program, error) {
	spec := l.spec.Copy()
	progs := make(map[string]*ebpf.ProgramSpec)
	for _, name := range names {
		if spec.Programs[name] == nil {
			return nil, fmt.Errorf("load BPF program %s: not in the collection", name)
		}
		progs[name] = spec.Programs[name]
	}
	spec.Programs = progs
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: maps})
	if err != nil {
		if isPermission(err) {
			return nil, fmt.Errorf("load BPF programs %v: %w: %w", names, ErrNotPermitted, err)
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("load BPF programs %v: %w: %w", names, ErrNoBPF, err)
		}
		return nil, fmt.Errorf("load BPF programs %v: %w", names, err)
	}
	defer coll.Close() // its clones of the maps
	out := make([]*ebpf.Program, len(names))
	for i, name := range names {
		out[i] = coll.DetachProgram(name)
	}
	return out, nil
}

// need makes sure the programs named are in objs: it waits for the
// background load of each (startLate), or loads it now if none was
// started. It returns the load's error.
func (l *loader) need(names ...string) error {
	progs := reflect.ValueOf(&l.objs.bpfPrograms).Elem()
	for _, name := range names {
		if !programField(progs, name).IsNil() {
			continue
		}
		var load *lateLoad
		for _, ll := range l.late {
			if slices.Contains(ll.names, name) {
				load = ll
			}
		}
		if load == nil {
			loads, err := l.startLate([]string{name})
			if err != nil {
				return err
			}
			load = loads[0]
		}
		<-load.done
		if load.err != nil {
			return load.err
		}
		for i, n := range load.names {
			programField(progs, n).Set(reflect.ValueOf(load.progs[i]))
		}
		load.taken = true
	}
	return nil
}

// programField is the field of bpfPrograms v tagged name.
func programField(v reflect.Value, name string) reflect.Value {
	for i := range v.NumField() {
		if v.Type().Field(i).Tag.Get("ebpf") == name {
			return v.Field(i)
		}
	}
	panic("no BPF program " + name) // names are constants of this package
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
	p.LoaderState, p.MapFault, p.MapPages = e.LoaderState, e.MapFault, e.MapPages
	p.ProcessExec, p.ProcessExit, p.ProcessFork = e.ProcessExec, e.ProcessExit, e.ProcessFork
	p.PytestSetenv, p.PytestUnsetenv = e.PytestSetenv, e.PytestUnsetenv
	if l.epoch, err = newFilterEpoch(l.objs.UserEpoch); err != nil {
		_ = l.closeObjs()
		return nil, fmt.Errorf("load BPF programs: %w: %w", ErrNoBPF, err)
	}
	if _, err := l.startLate(backgroundPrograms...); err != nil {
		_ = l.closeObjs()
		return nil, err
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
	l.att = newAttacher(&l.objs, l.need, 0)
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

// closeObjs unloads the BPF objects, once the late loads are done.
func (l *loader) closeObjs() error {
	for _, ll := range l.late {
		<-ll.done
		if !ll.taken {
			for _, p := range ll.progs {
				_ = p.Close()
			}
		}
	}
	l.late = nil
	return errors.Join(l.objs.Close(), l.data.Bss.Close(), l.data.Rodata.Close())
}
