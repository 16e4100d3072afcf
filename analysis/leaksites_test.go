package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// loopStream is a training loop of n iterations 10 ms apart: each makes
// and frees a 4 MiB activation at forward (stack 2, line 2), which paces
// the loop; keep(i) is the stack (0: none) and size of what iteration i
// keeps, 1 ms after its start. Stacks 3 and 4 are record_loss at line 18,
// one source line called from two return addresses (a loop the compiler
// unrolled); stack 5 is log_metrics at line 30.
func loopStream(n uint64, keep func(i uint64) (event.StackID, uint64)) *eventtest.Stream {
	s := eventtest.NewStream().Stack(2, "forward", 2).Stack(3, "record_loss", 18).Stack(4, "record_loss", 18).
		Stack(5, "log_metrics", 30)
	for i := range n {
		t := 10_000_000 + i*10_000_000
		act := 0x7f10_0000_0000 + i<<24
		s.Alloc(t, act, 4*MiB, 2)
		if st, size := keep(i); st != 0 {
			s.Alloc(t+1_000_000, 0x7f30_0000_0000+i<<24, size, st)
		}
		s.Free(t+2_000_000, act)
	}
	return s.End(10_000_000 + n*10_000_000)
}

// TestLeakSiteUnrolled: a leak whose allocations come from one source
// line through two return addresses (the first 30 iterations from one, the
// last 30 from the other) is one leak at that site, with every byte: each
// stack alone grew in half the run only.
func TestLeakSiteUnrolled(t *testing.T) {
	r := mustAnalyze(t, Options{}, loopStream(60, func(i uint64) (event.StackID, uint64) {
		if i < 30 {
			return 3, 128 * KiB
		}
		return 4, 128 * KiB
	}).Recs)
	leaks := findings(r, KindLeak)
	require.Len(t, leaks, 1)
	f := leaks[0]
	assert.Equal(t, 60*128*KiB, f.Bytes, "60 losses of 128 KiB kept")
	assert.Equal(t, 60*128*KiB, f.Leak.GrowthBytes)
	require.Len(t, f.Stacks, 1)
	assert.Equal(t, uint64(60), f.Stacks[0].Count, "the site's allocations, both stacks")
	assert.Equal(t, 60*128*KiB, f.Stacks[0].Bytes)
	assert.Equal(t, "record_loss (train.py:18)", f.Stacks[0].Site)
}

// TestLateLeak: a leak that starts at iteration 60 of 80 (1 MiB kept per
// iteration from there) rises in the last two of six time windows only;
// judged from the iteration before its first rise, it rises in every
// window of its own 20 iterations.
func TestLateLeak(t *testing.T) {
	r := mustAnalyze(t, Options{}, loopStream(80, func(i uint64) (event.StackID, uint64) {
		if i >= 60 {
			return 5, MiB
		}
		return 0, 0
	}).Recs)
	it := process(t, r, 100).Iterations
	require.NotNil(t, it)
	require.Equal(t, uint64(80), it.Count)
	leaks := findings(r, KindLeak)
	require.Len(t, leaks, 1)
	f := leaks[0]
	assert.Equal(t, "log_metrics (train.py:30)", f.Stacks[0].Site)
	assert.Equal(t, 20*MiB, f.Bytes)
	// The growth began in iteration 60: its start is the last one before
	// which the site held nothing.
	assert.Equal(t, it.Starts[60], f.Leak.Since)
	// Six windows of the 20 iterations from 60: window k < 6 ends where
	// iteration 60 + ceil(20 k / 6) = 64, 67, 70, 74, 77 starts, holding
	// what the iterations before it kept; the last at the end, all 20.
	assert.Equal(t, []uint64{4 * MiB, 7 * MiB, 10 * MiB, 14 * MiB, 17 * MiB, 20 * MiB}, f.Leak.Live)

	// Control: one 20 MiB buffer made at iteration 60 and kept (state made
	// late) is a step up, not a leak.
	r = mustAnalyze(t, Options{}, loopStream(80, func(i uint64) (event.StackID, uint64) {
		if i == 60 {
			return 5, 20 * MiB
		}
		return 0, 0
	}).Recs)
	assert.Empty(t, findings(r, KindLeak))
}

// TestExpandablePagesAreTheCache: under expandable segments the device
// memory is charged to the stack that created each page (cuMemCreate,
// stack 5), not to the mapping's (stack 1). The cache grows a 2 MiB page
// per iteration for 40 iterations while the tensors (stack 2) come and go:
// the pages' creator is a host of the blocks, so no leak, and the cache is
// said as such.
func TestExpandablePagesAreTheCache(t *testing.T) {
	p := eventtest.NewVMMPool()
	p.Stack(5, "cuMemCreate", 9)
	p.Reserve(eventtest.VMMBase, 1<<30)
	for i := range uint64(40) {
		addr := eventtest.VMMBase + i*2*MiB
		h := 0xbeef_0000 + i
		p.Ev(event.Event{Time: p.Next(), Duration: 10e3, Addr: h, Size: 2 * MiB, Stack: 5, TID: 1,
			Kind: event.KindCreate, API: event.APICuMemCreate})
		p.Map(addr, 2*MiB, h)
		p.Block(addr, MiB)
		p.BlockFree(addr)
	}
	r := mustAnalyze(t, Options{}, p.Finish())
	assert.Empty(t, findings(r, KindLeak), "the pages are the cache")
	cache := findings(r, KindCacheGrowth)
	require.Len(t, cache, 1)
	assert.Equal(t, SeverityInfo, cache[0].Severity)
	// Reserved peak 40 pages of 2 MiB; the tensors' peak one 1 MiB block.
	assert.Equal(t, 40*2*MiB-MiB, cache[0].Bytes)
}

// TestExpandablePagesForgotten: pages created, mapped, unmapped and
// released every step (empty_cache under expandable segments) leave
// nothing in the pool's creator maps, which would otherwise grow by a page
// a step for the whole run. 1000 steps; the control is the count of pages
// still mapped at the end: one.
func TestExpandablePagesForgotten(t *testing.T) {
	p := eventtest.NewVMMPool()
	p.Reserve(eventtest.VMMBase, 1<<30)
	keep := p.Create(2 * MiB)
	p.Map(eventtest.VMMBase, 2*MiB, keep)
	for range 1000 {
		addr := eventtest.VMMBase + 2*MiB
		p.Map(addr, 2*MiB, p.Create(2*MiB))
		p.Shrink(addr, 2*MiB)
	}
	a := New(Options{})
	for _, r := range p.Finish() {
		require.NoError(t, a.Add(r))
	}
	var handles, pages int
	for _, pl := range a.pools.pools {
		handles += len(pl.handles)
		pages += len(pl.pages)
	}
	assert.Equal(t, 0, handles, "creators of mapped handles")
	assert.Equal(t, 1, pages, "pages still mapped and never holding a block")
	a.Finish()
}
