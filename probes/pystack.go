//go:build linux

package probes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/python"
)

// DefaultPythonDepth is how many Python frames a record holds unless
// Options.PythonDepth says otherwise (MAX_PY_FRAMES is the most).
const DefaultPythonDepth = maxPyFrames

// evalFunction is CPython's evaluation loop: one native frame per entry from
// C into Python, where the Python frames of that entry belong.
const evalFunction = "_PyEval_EvalFrameDefault"

// isEvalFrame tells whether a native frame is in the evaluation loop: its
// symbol, or a part GCC names apart. With -freorder-blocks-and-partition
// (on from -O2) the blocks GCC deems cold go to a local symbol
// "_PyEval_EvalFrameDefault.cold"; a call made from there returns into it,
// and PGO builds move there whatever their training run left cold, calls
// into C and Python included. Clones (.constprop.N, .isra.N, .part.N) are
// the loop too.
func isEvalFrame(name string) bool {
	rest, ok := strings.CutPrefix(name, evalFunction)
	return ok && (rest == "" || rest[0] == '.')
}

// pyProc is what a traced process's CPython needs: its interpreter, for
// the frame boundaries, and a resolver of its code objects.
type pyProc struct {
	in  *python.Interpreter
	res *python.Resolver
}

// findPython looks for a CPython in p once per scan until one is found, and
// tells the BPF walker where its state is. An interpreter vramprof cannot
// read is reported once, in an Interpreter record with a note; the stacks
// stay native.
func (s *Session) findPython(p *proc) error {
	if s.opts.NoPython || p.py != nil || p.pyNoted {
		return nil
	}
	in, err := python.Find(int(p.pid))
	switch {
	case errors.Is(err, python.ErrUnsupported):
		p.pyNoted = true
		why := strings.TrimPrefix(err.Error(), fmt.Sprintf("find python in pid %d: ", p.pid))
		return s.writeInterpreter(&event.Interpreter{PID: p.pid, Name: "CPython",
			Note: fmt.Sprintf("no Python frames in pid %d: %s; native stacks only", p.pid, why)})
	case err != nil:
		// Not Python, or gone meanwhile (its exit is noticed elsewhere):
		// nothing to say; the next scan looks again.
		return nil
	}
	if err := s.loader.objs.PyProcs.Put(p.pid, pyProcFor(in, s.opts.PythonDepth)); err != nil {
		return fmt.Errorf("describe python of pid %d to BPF: %w", p.pid, err)
	}
	s.loader.epoch.bump() // the block layer's threads of p read py_procs again
	s.setPython(p, &pyProc{in: in, res: python.NewResolver(int(p.pid), in)})
	return s.writeInterpreter(&event.Interpreter{PID: p.pid, Name: "CPython", Version: versionString(in.Version), Path: in.Path})
}

func (s *Session) writeInterpreter(in *event.Interpreter) error {
	if err := s.opts.Sink.Write(in); err != nil {
		return fmt.Errorf("write interpreter record: %w", err)
	}
	return nil
}

// inheritPython gives a forked child its parent's interpreter (the BPF
// side copied the walker's entry at the fork) with a resolver of its own:
// the child's memory is its own from now on (and its parent's stands in
// for it once it is gone).
func (s *Session) inheritPython(child, parent *proc) error {
	if parent.py == nil {
		return nil
	}
	s.setPython(child, &pyProc{in: parent.py.in, res: parent.py.res.Fork(int(child.pid))})
	return s.writeInterpreter(&event.Interpreter{PID: child.pid, Name: "CPython", Version: versionString(parent.py.in.Version), Path: parent.py.in.Path})
}

// dropPython forgets p's CPython and closes its resolver (the process
// exited and its records are all read, or it exec'd another image).
func (s *Session) dropPython(p *proc) {
	if p.py != nil {
		s.prefetch.mu.Lock()
		if s.prefetch.res[p.pid] == p.py.res {
			delete(s.prefetch.res, p.pid)
		}
		s.prefetch.mu.Unlock()
		_ = p.py.res.Close()
		p.py = nil
	}
	p.pyNoted = false
	p.pytest = false
}

// setPython gives p its CPython and lists its resolver for the prefetcher.
func (s *Session) setPython(p *proc, py *pyProc) {
	p.py = py
	s.prefetch.mu.Lock()
	s.prefetch.res[p.pid] = py.res
	s.prefetch.mu.Unlock()
}

// pyPrefetch is the Python code objects' fast lane (see startPrefetch).
type pyPrefetch struct {
	mu  sync.Mutex
	res map[uint32]*python.Resolver // by pid: the processes with a CPython
}

// startPrefetch starts the fast lane of Python code objects. The BPF side
// sends the code objects of every Python stack a process shows for the
// first time to a ring of their own (py_new), and this goroutine reads them
// from the process's memory at once. The records themselves wait their
// turn behind the symbolization of earlier stacks (the first lookup in a
// library with DWARF lines takes hundreds of milliseconds), and a process
// may exit, and free its code objects, before then; the resolver's cache
// then has them when the record is handled. The goroutine ends when the
// loader closes the ring, and the loader waits for it.
func (s *Session) startPrefetch() {
	s.prefetch = pyPrefetch{res: make(map[uint32]*python.Resolver)}
	s.loader.readers.Go(s.prefetchLoop)
}

func (s *Session) prefetchLoop() {
	var rec ringbuf.Record
	codes := make([]uint64, 0, maxPyFrames)
	for {
		if err := s.loader.pyRing.ReadInto(&rec); err != nil {
			return // closed (Close), or broken: the records still resolve, later
		}
		b := rec.RawSample
		if len(b) < 8 {
			continue
		}
		// struct py_codes: tgid, n, then n (code, instr) pairs.
		pid, n := binary.LittleEndian.Uint32(b), int(binary.LittleEndian.Uint32(b[4:]))
		codes = codes[:0]
		for i := 0; i < n && i < maxPyFrames && 8+16*i+8 <= len(b); i++ {
			codes = append(codes, binary.LittleEndian.Uint64(b[8+16*i:]))
		}
		s.prefetch.mu.Lock()
		res := s.prefetch.res[pid]
		s.prefetch.mu.Unlock()
		if res != nil {
			res.Prefetch(codes)
		}
	}
}

// pythonOf is the CPython of traced process pid, nil when it has none (or
// is not traced).
func (s *Session) pythonOf(pid uint32) *pyProc {
	if p := s.procs.procs[pid]; p != nil {
		return p.py
	}
	return nil
}

func versionString(v python.Version) string {
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro)
}

// pyProcFor is the BPF walker's description of in.
func pyProcFor(in *python.Interpreter, depth int) bpfPyProc {
	l := &in.Layout
	if depth <= 0 || depth > maxPyFrames {
		depth = maxPyFrames
	}
	return bpfPyProc{
		Runtime:        in.RuntimeAddr,
		InterpHead:     int32(l.RuntimeInterpHead),
		InterpNext:     int32(l.InterpNext),
		InterpThreads:  int32(l.InterpThreadsHead),
		ThreadNext:     int32(l.ThreadNext),
		ThreadNativeId: int32(l.ThreadNativeID),
		ThreadId:       int32(l.ThreadID),
		ThreadFrame:    int32(l.ThreadFrame),
		CframeCurrent:  int32(l.CFrameCurrent),
		FramePrevious:  int32(l.FramePrevious),
		FrameCode:      int32(l.FrameCode),
		FrameInstr:     int32(l.FrameInstr),
		FrameInstrSize: int32(l.FrameInstrSize),
		FrameOwner:     int32(l.FrameOwner),
		FrameSize:      int32(l.FrameSize),
		Depth:          uint32(depth),
	}
}

// pySegments resolves raw Python frames (code, instr pairs, innermost
// first) and cuts them into the runs each C-to-Python entry evaluates,
// innermost first: the frames one evaluation-loop native frame stands for.
func pySegments(py *pyProc, raw []uint64, flags uint8) [][]event.Frame {
	var segs [][]event.Frame
	var cur []event.Frame
	for i := 0; i+1 < len(raw); i += 2 {
		code, instr := raw[i], raw[i+1]
		skip, entryAfter := py.in.Layout.Boundary(py.in.Version, uint8(instr>>56))
		if skip {
			// A shim frame of the C stack: the entry it marks ends the
			// frames above it.
			if len(cur) > 0 {
				segs, cur = append(segs, cur), nil
			}
			continue
		}
		f, _ := py.res.Frame(code, instr&(1<<56-1))
		f.Addr = 0 // a code object is no code address: pprof shows none
		cur = append(cur, f)
		if entryAfter {
			segs, cur = append(segs, cur), nil
		}
	}
	if flags&(recFlagPyTrunc|recFlagPyBroke) != 0 {
		cur = append(cur, event.Frame{Function: pyCutFunction(flags)})
	}
	if len(cur) > 0 {
		segs = append(segs, cur)
	}
	return segs
}

// pyCutFunction names the frame that ends a Python stack cut short.
func pyCutFunction(flags uint8) string {
	if flags&recFlagPyTrunc != 0 {
		return "<python frames past the depth limit>"
	}
	return "<python frame unreadable>"
}

// mergeStacks puts the Python frames where the native stack passes through
// the evaluation loop, one entry's frames per evaluation-loop frame, as
// py-spy --native does. Entries the native stack does not reach (an
// interpreter built without frame pointers ends the native walk early) go
// above the last native frame, so the Python callers are never lost.
func mergeStacks(native []event.Frame, segs [][]event.Frame) []event.Frame {
	if len(segs) == 0 {
		return native
	}
	out := make([]event.Frame, 0, len(native)+len(segs)*4)
	for _, f := range native {
		if isEvalFrame(f.Function) && len(segs) > 0 {
			out = append(out, segs[0]...)
			segs = segs[1:]
			continue
		}
		if len(segs) > 0 && f.Mapping == 0 && f.Function == "" {
			// An address in no mapping is no return address: the
			// frame-pointer chain broke in code built without frame
			// pointers (Debian's interpreter, libffi), and what follows
			// is noise. The Python frames say who called.
			break
		}
		out = append(out, f)
	}
	for _, seg := range segs {
		out = append(out, seg...)
	}
	return out
}
