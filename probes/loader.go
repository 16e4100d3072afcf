//go:build linux

package probes

import (
	"errors"
	"fmt"
	"os"
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
	l := &loader{}
	if err := spec.LoadAndAssign(&l.objs, nil); err != nil {
		if isPermission(err) {
			return nil, fmt.Errorf("load BPF programs: %w: %w", ErrNotPermitted, err)
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("load BPF programs: %w: %w", ErrNoBPF, err)
		}
		return nil, fmt.Errorf("load BPF programs: %w", err)
	}
	if l.epoch, err = newFilterEpoch(l.objs.UserEpoch); err != nil {
		_ = l.objs.Close()
		return nil, fmt.Errorf("load BPF programs: %w: %w", ErrNoBPF, err)
	}
	l.ring, err = ringbuf.NewReader(l.objs.Events)
	if err != nil {
		_ = l.objs.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	l.pyRing, err = ringbuf.NewReader(l.objs.PyNew)
	if err != nil {
		_ = l.ring.Close()
		_ = l.objs.Close()
		return nil, fmt.Errorf("open python ring buffer: %w", err)
	}
	l.att = newAttacher(&l.objs, 0)
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
	if err := l.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("unload BPF objects: %w", err))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
