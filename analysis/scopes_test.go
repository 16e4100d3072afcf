package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// TestChurnReleaseScope: a step takes a 20 MiB segment and empties the
// cache after it, inside an emptyCache scope whose entry stack is
// release_every_step's, while the segment frees come without a stack
// (the walk lost it in the allocator). The cycles' release stack is the
// scope's; a free outside any scope keeps its own (none).
func TestChurnReleaseScope(t *testing.T) {
	s := eventtest.NewPoolStream()
	s.Stack(3, "release_every_step", 30)
	for range 5 {
		s.Seg(eventtest.SegBase, 20*MiB)
		s.Block(eventtest.SegBase, 4*MiB)
		s.BlockFree(eventtest.SegBase)
		s.EmptyCache(3, eventtest.SegBase)
	}
	// After the last scope ended: a release of the thread's own, taken
	// back.
	s.Seg(eventtest.SegBase, 20*MiB)
	s.SegFree(eventtest.SegBase)
	s.Seg(eventtest.SegBase, 20*MiB)
	r := poolResult(t, s)

	c := process(t, r, 100).Churn
	require.NotNil(t, c)
	assert.Equal(t, uint64(6), c.Cycles)
	assert.Equal(t, uint64(6*20*MiB), c.CycleBytes)
	require.Len(t, c.FreeStacks, 2)
	assert.Equal(t, event.StackID(3), c.FreeStacks[0].Stack, "the scope's caller released 5 of the 6")
	assert.Equal(t, uint64(5*20*MiB), c.FreeStacks[0].Bytes)
	assert.Equal(t, event.StackID(0), c.FreeStacks[1].Stack, "outside the scope: the free's own stack")
	fs := findings(r, KindChurn)
	require.Len(t, fs, 1)
	require.NotEmpty(t, fs[0].Stacks)
	assert.Equal(t, uint64(6*20*MiB), fs[0].Bytes)
	require.NotNil(t, r.Blocks)
	assert.Zero(t, r.Blocks.IgnoredEvents, "scope events are the model's")
}

// TestScopeNesting: scopes pair by rsp; an end above a begin that never
// returned (an exception unwound through it) closes it too, and a release
// on another thread is not the scope's; a release whose own stack reaches
// the scope's caller keeps it.
func TestScopeNesting(t *testing.T) {
	var m scopeModel
	stacks := map[event.StackID]*event.Stack{
		3: {ID: 3, Frames: []event.Frame{{Addr: 0x4ef60}, {Addr: 0x55c2}, {Addr: 0x5600}}},
		// Through the scope's function to its caller: whole.
		7: {ID: 7, Frames: []event.Frame{{Addr: 0x7f00}, {Addr: 0x4f000}, {Addr: 0x55c2}, {Addr: 0x5600}}},
		// Cut short in the allocator.
		9: {ID: 9, Frames: []event.Frame{{Addr: 0x7f00}, {Addr: 0x4e900}}},
	}
	mark := func(e *event.Event) { m.mark(e, stacks[e.Stack]) }
	attribute := func(e *event.Event) *event.Event { return m.attribute(e, stacks) }
	ev := func(k event.Kind, tid uint32, sp uint64, st event.StackID) *event.Event {
		return &event.Event{PID: 1, TID: tid, Addr: sp, Stack: st, Kind: k, Layer: event.LayerBlock}
	}
	free := &event.Event{PID: 1, TID: 1, Kind: event.KindFree, Stack: 9}
	assert.Same(t, free, attribute(free), "no scope")

	mark(ev(event.KindScopeBegin, 1, 0x1000, 3))
	mark(ev(event.KindScopeBegin, 1, 0x0f00, 4)) // nested: lower rsp
	assert.Equal(t, event.StackID(3), attribute(free).Stack, "the outermost scope's stack")
	other := &event.Event{PID: 1, TID: 2, Kind: event.KindFree, Stack: 9}
	assert.Same(t, other, attribute(other), "another thread")
	alloc := &event.Event{PID: 1, TID: 1, Kind: event.KindAlloc, Stack: 9}
	assert.Same(t, alloc, attribute(alloc), "not a release")
	unmap := &event.Event{PID: 1, TID: 1, Kind: event.KindUnmap, Stack: 9}
	assert.Equal(t, event.StackID(3), attribute(unmap).Stack, "an unmap is a release")
	whole := &event.Event{PID: 1, TID: 1, Kind: event.KindFree, Stack: 7}
	assert.Same(t, whole, attribute(whole), "its own stack reaches the scope's caller")

	// The outer call's return: the inner one, below it, is gone too.
	mark(ev(event.KindScopeEnd, 1, 0x1000, 0))
	assert.Zero(t, m.n)
	assert.Empty(t, m.open)
	assert.Same(t, free, attribute(free))

	// A begin that never ended, then another call at the same rsp.
	mark(ev(event.KindScopeBegin, 1, 0x1000, 3))
	mark(ev(event.KindScopeBegin, 1, 0x1000, 5))
	assert.Equal(t, 1, m.n)
	assert.Equal(t, event.StackID(5), attribute(free).Stack)
	mark(ev(event.KindScopeEnd, 1, 0x1000, 0))
	assert.Zero(t, m.n)
}
