package analysis

import "github.com/vramprof/vramprof/probes/event"

// Release scopes: a caching allocator gives its cached segments back in
// bulk when the program asks it to (torch.cuda.empty_cache() ->
// NativeCachingAllocator::emptyCache), and the cudaFree stacks of that
// release are walked deep inside the allocator, where a frame-pointer walk
// stops: Debian's libc10_cuda.so keeps a pointer in rbp two frames above
// cudaFree, and the frames of the program that asked are lost. The
// allocator function is probed as a scope instead (event.KindScopeBegin at
// its entry, whose stack names its caller, and event.KindScopeEnd at its
// returns), and every segment release a thread makes inside a scope takes
// the scope's stack when its own lost the scope's caller: the site of a
// release is where it was asked for. A release whose stack reaches the
// caller (an allocator built with frame pointers) keeps its own, which
// says the same and more. It is done here, as the events come in, so that
// every model downstream (books, churn, forensics) sees one stack per
// release.

// openScope is a scope in flight on a thread: rsp at its entry, its entry
// stack, and the return address into its caller (the stack's frame 1; 0
// when unknown).
type openScope struct {
	sp, caller uint64
	stack      event.StackID
}

// threadKey is a thread of a process instance.
type threadKey struct{ pid, tid uint32 }

// scopeModel is the scopes in flight per thread. Scopes nest by rsp (the
// stack grows down): an inner call has a lower rsp than the one it is
// made in.
type scopeModel struct {
	open map[threadKey][]openScope
	// n is how many scopes are in flight on all threads: with none, a
	// release costs one test.
	n int
}

// mark applies a scope event: a begin opens a scope, and an end closes the
// scope at its rsp. Both first close every scope of the thread at or
// below their rsp: a call an exception unwound through never reached a
// return, and its frame is gone once the thread is back above it. st is
// the begin's stack, nil when it has none.
func (m *scopeModel) mark(e *event.Event, st *event.Stack) {
	k := threadKey{e.PID, e.TID}
	s := m.open[k]
	for len(s) > 0 && s[len(s)-1].sp <= e.Addr {
		s = s[:len(s)-1]
		m.n--
	}
	if e.Kind == event.KindScopeBegin {
		if m.open == nil {
			m.open = make(map[threadKey][]openScope)
		}
		o := openScope{sp: e.Addr, stack: e.Stack}
		if st != nil && len(st.Frames) > 1 {
			o.caller = st.Frames[1].Addr
		}
		s = append(s, o)
		m.n++
	}
	if len(s) == 0 {
		delete(m.open, k)
		return
	}
	m.open[k] = s
}

// releases reports whether an event gives segment memory back (the kinds
// a cache release is made of: cudaFree, cuMemFree, and under expandable
// segments cuMemUnmap and cuMemRelease).
func releases(k event.Kind) bool {
	return k == event.KindFree || k == event.KindUnmap || k == event.KindRelease
}

// attribute returns e, or a copy of it with the stack of the outermost
// scope in flight on its thread (its caller is the program's code) when e
// is a segment release made inside one whose own stack, stacks[e.Stack],
// does not reach that scope's caller.
func (m *scopeModel) attribute(e *event.Event, stacks map[event.StackID]*event.Stack) *event.Event {
	if m.n == 0 || !releases(e.Kind) {
		return e
	}
	s := m.open[threadKey{e.PID, e.TID}]
	if len(s) == 0 || s[0].stack == 0 || s[0].stack == e.Stack {
		return e
	}
	if own := stacks[e.Stack]; own != nil && s[0].caller != 0 {
		for _, f := range own.Frames {
			if f.Addr == s[0].caller {
				return e
			}
		}
	}
	c := *e
	c.Stack = s[0].stack
	return &c
}
