package analysis

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// poolKey is one process's caching allocator on one device.
type poolKey struct {
	pid    uint32
	device int32
}

// pool is the geometry of one process's memory on one device: the segments
// it got from CUDA (the segment layer) and the blocks handed out inside them
// (the block layer), placed by address. It exists for every process with
// segment-layer allocations; only those with block events are reported.
type pool struct {
	key poolKey
	// segs are the live segments, sorted by address; a block lies in the
	// one whose range holds its address (binary search: O(log segments)).
	segs segList
	// reserved sums the live segments; allocated the live blocks placed in
	// them; unplaced the live blocks in no traced segment (a segment from
	// before attach, or a segment record lost), outside reserved and
	// allocated both.
	reserved, allocated, unplaced uint64
	// unplacedBlocks are those blocks, by address.
	unplacedBlocks map[uint64]poolBlock
	// blocks is set once a block event came for the pool: its
	// fragmentation figures and OOM forensics are reported.
	blocks bool
	// hosts are the stacks of the segments a block was ever placed in
	// (and, for a mapped segment, of the cuMemCreate calls that made its
	// pages): the allocator's own segments, which the leak rule leaves to
	// the blocks (see doc.go, "The leak rule").
	hosts map[event.StackID]bool
	// worst is the state at the largest cached-free total seen while
	// blocks were allocated. Its geometry (free ranges) is taken lazily:
	// worstPending is set when a new maximum is reached, and the snapshot
	// is completed before the next event changes the pool, so the cost is
	// paid at local maxima only, not at every event.
	worst        *PoolState
	worstPending bool
	// ooms are the failed segment allocations while blocks were traced;
	// open is the last one while a retry may still follow.
	ooms []*oomRecord
	open *oomRecord
	// expandable is set once a mapped range (cuMemMap) came for the pool:
	// the allocator grows its segments by mapping pages (PyTorch's
	// expandable_segments:True). vmmRun sums the physical memory thread
	// vmmTID created since its last mapping: what one request asked of
	// the driver so far (a failing cuMemCreate adds its own size).
	expandable bool
	vmmRun     uint64
	vmmTID     uint32
	// spare are freed segments for the next ones to reuse (with their
	// block slices, emptied): a training loop frees and allocates
	// segments all along, and a new one each time is garbage. They are at
	// most as many as were ever live at once.
	spare []*poolSegment
	// handles are the stacks that created the live physical handles
	// (cuMemCreate, by handle) and pages the stacks of the physical
	// memory mapped at each page start (cuMemMap, by address): a mapped
	// segment a block is placed in makes its pages' creators hosts too,
	// since under expandable segments the device memory is charged to
	// cuMemCreate's stack, not to the mapping's.
	handles map[uint64]event.StackID
	pages   map[uint64]poolPage
}

// poolPage is a mapped page's size and the stack that created its memory.
type poolPage struct {
	size  uint64
	stack event.StackID
}

// poolSegment is one live segment, kept small (32 bytes). The pool holds
// pointers: a free copies the tail of the sorted list, a quarter of the
// bytes of values.
type poolSegment struct {
	addr, size uint64
	stack      event.StackID
	api        event.API
	in         *segBlocks // nil until a block lies in it
}

// segBlocks are a segment's live blocks, sorted by address:
// store[head:head+n]. A block freed in the front half of the list is
// sliced off (head moves up), the few before it shifted, not the rest of
// the list: the allocator hands out and takes back a segment's blocks in
// address order as often as not, and shifting the rest at each free was
// most of the pools' copying. An insert with no room after the list moves
// it back to the start of store. Kept to 32 bytes, as the slice and sum it
// replaced: the sum of the sizes is taken when the segment goes.
type segBlocks struct {
	store   []poolBlock // its whole length is room
	head, n uint32
}

// list returns the blocks.
func (s *segBlocks) list() []poolBlock { return s.store[s.head : s.head+s.n] }

// insert puts b at index j of the blocks.
func (s *segBlocks) insert(j int, b poolBlock) {
	if int(s.head+s.n) == len(s.store) {
		if s.head == 0 {
			s.store = slices.Grow(s.store, 1) // as append grows it
			s.store = s.store[:cap(s.store)]
		} else {
			copy(s.store, s.list())
			s.head = 0
		}
	}
	l := s.store[s.head : s.head+s.n+1]
	copy(l[j+1:], l[j:])
	l[j] = b
	s.n++
}

// remove deletes the block at index j, shifting the shorter side.
func (s *segBlocks) remove(j int) {
	l := s.list()
	if j < len(l)/2 {
		copy(l[1:j+1], l[:j])
		s.head++
	} else {
		copy(l[j:], l[j+1:])
	}
	if s.n--; s.n == 0 {
		s.head = 0
	}
}

// blocks returns the segment's live blocks, sorted by address.
func (s *poolSegment) blocks() []poolBlock {
	if s.in == nil {
		return nil
	}
	return s.in.list()
}

// searchBlocks is slices.BinarySearchFunc on the blocks' addresses,
// written out (it runs for every block event).
func searchBlocks(blocks []poolBlock, addr uint64) (int, bool) {
	lo, hi := 0, len(blocks)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if blocks[m].addr < addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(blocks) && blocks[lo].addr == addr
}

// smallSegment is PyTorch's small-pool segment (kSmallBuffer, 2 MiB):
// large-pool segments are 20 MiB or at least 10 MiB, and only they are
// released by garbage collection (garbage_collect_cached_blocks walks the
// large pool's unsplit free blocks).
const smallSegment = 2 << 20

// oomRecord is a failed segment allocation being recorded: the OOM that
// Result.Pools lists, with what the rules read of it beside (oomGeometry)
// and the live blocks by stack until Finish ranks them (OOM.LiveStacks).
type oomRecord struct {
	OOM
	blockStacks map[event.StackID]*Usage
	geometry    oomGeometry
}

// oomGeometry is what the OOM forensics read of the segments at a failed
// segment allocation besides OOM.State (Analyzer.oomGeometry, by
// OOM.Index).
type oomGeometry struct {
	// maxSharedSegment is the largest segment holding live blocks
	// smaller than the request.
	maxSharedSegment uint64
	// idleLarge sums the segments with no live block larger than a
	// small-pool segment: what PyTorch's garbage collection could release.
	idleLarge uint64
}

// poolBlock is one live block.
type poolBlock struct {
	addr, size uint64
	stack      event.StackID
	api        event.API // pytorch:malloc, or allocspec:alloc for an allocator spec's
}

// poolModel is the pools' geometry, an observer: it places each segment and
// block the ledger makes live or frees.
type poolModel struct {
	pools map[poolKey]*pool
	// last caches the latest pool: consecutive events mostly come from one
	// process on one device.
	last *pool
	// ledger and classes are the analysis's: a pool's first block event
	// takes its segments from the ledger's live allocations.
	ledger  *ledger.Ledger
	classes *[]*classState
	// failed is called with a failed segment allocation (it opens an OOM
	// record, which names the process instance): request is the bytes the
	// allocator asked for, vmm set when they were pages of an expandable
	// segment (cuMemCreate).
	failed func(p *pool, e *event.Event, request uint64, vmm bool)
	// reservationStart reports whether a range the process reserved
	// (cuMemAddressReserve) starts at addr: mapped ranges on either side
	// of it lie in different reservations and are different segments.
	reservationStart func(pid uint32, addr uint64) bool
}

func (m *poolModel) pool(pid uint32, device int32) *pool {
	k := poolKey{pid, device}
	if p := m.last; p != nil && p.key == k {
		return p
	}
	p := m.pools[k]
	if p == nil {
		p = &pool{key: k, unplacedBlocks: make(map[uint64]poolBlock)}
		m.pools[k] = p
	}
	m.last = p
	return p
}

// touch completes a pending worst-moment snapshot before the pool changes.
func (p *pool) touch() {
	if p.worstPending {
		p.snapshot(p.worst)
		p.worstPending = false
	}
}

// noteWorst records a new worst moment when cached free bytes exceed the
// previous worst while blocks are allocated.
func (p *pool) noteWorst(t uint64) {
	if !p.blocks || p.allocated == 0 {
		return
	}
	free := p.reserved - p.allocated
	if p.worst != nil && free <= p.worst.CachedFreeBytes {
		return
	}
	p.worst = &PoolState{Time: t, ReservedBytes: p.reserved, AllocatedBytes: p.allocated, CachedFreeBytes: free}
	p.worstPending = true
}

// segmentAlloc adds a segment the process got from CUDA. Until a block
// event comes the pool keeps no segments: the live allocations hold them
// (see Analyzer.poolBlocks).
func (p *pool) segmentAlloc(e *event.Event) {
	if !p.blocks {
		return
	}
	p.touch()
	p.segs.insert(p.newSegment(e.Addr, e.Size, e.Stack, e.API))
	p.reserved += e.Size
	// Blocks seen before their segment (a segment from before attach that
	// was freed and reallocated is not possible; but a missed segment
	// record is) stay unplaced: they are not moved in.
	p.noteWorst(e.Time)
}

// newSegment returns a segment, a spare one when there is one.
func (p *pool) newSegment(addr, size uint64, stack event.StackID, api event.API) *poolSegment {
	if n := len(p.spare); n > 0 {
		s := p.spare[n-1]
		p.spare = p.spare[:n-1]
		s.addr, s.size, s.stack, s.api = addr, size, stack, api
		return s
	}
	return &poolSegment{addr: addr, size: size, stack: stack, api: api}
}

// recycle keeps a segment removed from the list for newSegment, its
// blocks emptied.
func (p *pool) recycle(s *poolSegment) {
	if s.in != nil {
		s.in.head, s.in.n = 0, 0
	}
	p.spare = append(p.spare, s)
}

// appendBlock adds b after the segment's blocks (b lies above them all).
func (s *poolSegment) appendBlock(b poolBlock) {
	if s.in == nil {
		s.in = &segBlocks{}
	}
	s.in.insert(int(s.in.n), b)
}

// mapped reports whether the segment is a mapped range (the VMM API), not
// a cudaMalloc.
func (s *poolSegment) mapped() bool { return s.api == event.APICuMemMap }

// mapAdd adds a range a cuMemMap backed, [e.Addr, e.Addr+e.Size): a
// segment of the geometry, merged with the mapped segments it touches
// inside one reservation (an expandable segment grows page by page, and a
// block may span pages). reserved is the pool's reservations: a mapped
// range never merges across the start of one.
func (p *pool) mapAdd(e *event.Event, reserved func(addr uint64) bool) {
	p.expandable = true
	p.vmmRun = 0
	if st, ok := p.handles[e.Stream]; ok {
		// A handle's creator is wanted once, at its mapping: dropped
		// here, so that pages made and released every step (empty_cache
		// under expandable segments) keep the maps as small as what is
		// mapped.
		delete(p.handles, e.Stream)
		if p.pages == nil {
			p.pages = make(map[uint64]poolPage)
		}
		p.pages[e.Addr] = poolPage{size: e.Size, stack: st}
	}
	if o := p.open; o != nil && o.Outcome == OOMPending && o.Expandable && o.TID == e.TID {
		// The pages the retry asked for were all created: it worked.
		o.Outcome = OOMRetried
		o.RetryTime = e.Time
		o.CostNs += e.Duration
		p.open = nil
	}
	if !p.blocks {
		return
	}
	p.touch()
	p.reserved += e.Size
	var s *poolSegment
	if e.Addr > 0 && !reserved(e.Addr) {
		if l := p.segs.at(e.Addr - 1); l != nil && l.mapped() && l.addr+l.size == e.Addr {
			l.size += e.Size
			s = l
		}
	}
	if s == nil {
		s = p.newSegment(e.Addr, e.Size, e.Stack, e.API)
		p.segs.insert(s)
	}
	if end := s.addr + s.size; !reserved(end) {
		if ci, j, ok := p.segs.locate(end); ok && p.segs.chunks[ci].addrs[j] == end && p.segs.chunks[ci].segs[j].mapped() {
			r := p.segs.removeAt(ci, j)
			s.size += r.size
			for _, b := range r.blocks() {
				s.appendBlock(b)
			}
			p.recycle(r)
		}
	}
	// Blocks an unmap left in no segment lie in one again: an importer
	// unmaps a whole range and maps its parts again (profile/snapshot).
	if len(p.unplacedBlocks) > 0 {
		for addr, b := range p.unplacedBlocks {
			if addr < s.addr || addr >= s.addr+s.size {
				continue
			}
			if s.in == nil {
				s.in = &segBlocks{}
			}
			if j, found := searchBlocks(s.in.list(), addr); !found {
				s.in.insert(j, b)
				p.allocated += b.size
			}
			delete(p.unplacedBlocks, addr)
			p.unplaced -= b.size
		}
	}
	if s.in != nil && s.in.n > 0 {
		// The pages grew a segment that holds blocks.
		if p.hosts == nil {
			p.hosts = make(map[event.StackID]bool)
		}
		p.hostPages(s)
	}
	p.noteWorst(e.Time)
}

// mapRemove takes the range [addr, addr+size) a cuMemUnmap removed out of
// the mapped segment that holds it: what is left on either side stays, as
// one segment or two. Blocks inside the range (a missed block free)
// become unplaced. It reports whether a mapped segment held addr.
func (p *pool) mapRemove(t, addr, size, duration uint64) bool {
	// The range is one mapping (mapped calls this per mapping): its page,
	// if it never held a block, goes with it.
	delete(p.pages, addr)
	if !p.blocks {
		return false
	}
	ci, j, ok := p.segs.locate(addr)
	if !ok || !p.segs.chunks[ci].segs[j].mapped() {
		return false
	}
	p.touch()
	s := p.segs.removeAt(ci, j)
	end := min(addr+size, s.addr+s.size)
	p.reserved -= end - addr
	var left, right *poolSegment
	if addr > s.addr {
		left = p.newSegment(s.addr, addr-s.addr, s.stack, s.api)
	}
	if end < s.addr+s.size {
		right = p.newSegment(end, s.addr+s.size-end, s.stack, s.api)
	}
	for _, b := range s.blocks() {
		switch {
		case b.addr < addr:
			left.appendBlock(b)
		case b.addr >= end:
			right.appendBlock(b)
		default:
			p.allocated -= b.size
			p.unplacedBlocks[b.addr] = b
			p.unplaced += b.size
		}
	}
	p.recycle(s)
	for _, n := range []*poolSegment{left, right} {
		if n != nil {
			p.segs.insert(n)
		}
	}
	if o := p.open; o != nil && o.Outcome == OOMPending {
		o.ReleasedBytes += end - addr
		o.ReleasedSegments++
		o.CostNs += duration
	}
	p.noteWorst(t)
	return true
}

// created notes a cuMemCreate that made physical memory: one more page
// the current request of thread tid asks for.
func (p *pool) created(tid uint32, size uint64, handle uint64, stack event.StackID) {
	if p.handles == nil {
		p.handles = make(map[uint64]event.StackID)
	}
	p.handles[handle] = stack
	if p.vmmTID != tid {
		p.vmmRun, p.vmmTID = 0, tid
	}
	p.vmmRun += size
}

// segmentFree drops a segment. Blocks still live in it (a missed block
// free) become unplaced.
func (p *pool) segmentFree(t, addr, duration uint64) {
	if !p.blocks {
		return
	}
	// Located once, removed after touch (which must see the pool as it
	// was). Unlike at, locate leaves the hot segment alone: segment frees
	// come between the blocks of another segment.
	ci, j, ok := p.segs.locate(addr)
	if !ok || p.segs.chunks[ci].addrs[j] != addr {
		return
	}
	p.touch()
	s := p.segs.removeAt(ci, j)
	p.reserved -= s.size
	for _, b := range s.blocks() {
		p.allocated -= b.size
		p.unplacedBlocks[b.addr] = b
		p.unplaced += b.size
	}
	p.recycle(s)
	if o := p.open; o != nil && o.Outcome == OOMPending {
		o.ReleasedBytes += s.size
		o.ReleasedSegments++
		o.CostNs += duration
	}
	p.noteWorst(t)
}

// blockAlloc places a block handed out by the allocator.
func (p *pool) blockAlloc(e *event.Event) {
	p.touch()
	p.closeOpen()
	p.blocks = true
	p.vmmRun = 0
	b := poolBlock{addr: e.Addr, size: e.Size, stack: e.Stack, api: e.API}
	seg := p.segs.at(e.Addr)
	if seg == nil {
		p.unplacedBlocks[e.Addr] = b
		p.unplaced += e.Size
		return
	}
	if seg.in == nil {
		seg.in = &segBlocks{}
	}
	s := seg.in
	if s.n == 0 {
		// The segment's first block since it was empty (a spare segment
		// reused for another stack keeps its emptied list): once per
		// segment filled, not per block.
		if p.hosts == nil {
			p.hosts = make(map[event.StackID]bool)
		}
		p.hosts[seg.stack] = true
		if seg.mapped() {
			p.hostPages(seg)
		}
	}
	blocks := s.list()
	j, found := searchBlocks(blocks, e.Addr)
	if found {
		// A free was missed: the new block replaces the old.
		p.allocated -= blocks[j].size
		blocks[j] = b
	} else {
		s.insert(j, b)
	}
	p.allocated += e.Size
	p.noteWorst(e.Time)
}

// hostPages makes the creators of the pages mapped inside mapped segment
// seg hosts: their memory holds the segment's blocks. A page counted once
// leaves pages (its stack is a host for good).
func (p *pool) hostPages(seg *poolSegment) {
	for addr, pg := range p.pages {
		if addr >= seg.addr && addr+pg.size <= seg.addr+seg.size {
			p.hosts[pg.stack] = true
			delete(p.pages, addr)
		}
	}
}

// blockFree returns a block to the cache.
func (p *pool) blockFree(t, addr uint64) {
	p.touch()
	p.closeOpen()
	p.blocks = true
	p.vmmRun = 0
	if len(p.unplacedBlocks) > 0 { // mostly none: no lookup
		if b, ok := p.unplacedBlocks[addr]; ok {
			delete(p.unplacedBlocks, addr)
			p.unplaced -= b.size
			return
		}
	}
	seg := p.segs.at(addr)
	if seg == nil {
		return
	}
	s := seg.in
	if s == nil {
		return
	}
	blocks := s.list()
	j, found := searchBlocks(blocks, addr)
	if !found {
		return
	}
	p.allocated -= blocks[j].size
	s.remove(j)
	p.noteWorst(t)
}

// pinnedShare: a segment is pinned when one live block holds less than this
// fraction of it (1/pinnedShare): empty_cache cannot release the segment,
// and the block keeps the rest of it out of every other pool and stream.
const pinnedShare = 4

// snapshot fills the geometry of st from the pool as it is now: free
// ranges between and around live blocks, the largest, and pinned segments.
// Cost O(segments + live blocks).
func (p *pool) snapshot(st *PoolState) {
	st.ReservedBytes, st.AllocatedBytes = p.reserved, p.allocated
	st.CachedFreeBytes = p.reserved - p.allocated
	st.UnplacedBytes = p.unplaced
	st.Segments = p.segs.len()
	st.LargestFreeRange, st.FreeRanges, st.PinnedSegments, st.PinnedBytes = 0, 0, 0, 0
	for s := range p.segs.all() {
		blocks := s.blocks()
		end := s.addr
		gap := func(to uint64) {
			if to > end {
				st.FreeRanges++
				st.LargestFreeRange = max(st.LargestFreeRange, to-end)
			}
		}
		for _, b := range blocks {
			gap(b.addr)
			end = max(end, b.addr+b.size)
		}
		gap(s.addr + s.size)
		// A mapped range is not pinned: the allocator unmaps the free
		// pages around a block.
		if len(blocks) == 1 && blocks[0].size*pinnedShare < s.size && !s.mapped() {
			st.PinnedSegments++
			st.PinnedBytes += s.size - blocks[0].size
		}
	}
}

// liveBlocksByStack sums the live blocks by stack (placed or not).
func (p *pool) liveBlocksByStack() map[event.StackID]*Usage {
	m := make(map[event.StackID]*Usage)
	add := func(b poolBlock) {
		u := m[b.stack]
		if u == nil {
			u = &Usage{}
			m[b.stack] = u
		}
		u.Add(b.size)
	}
	for s := range p.segs.all() {
		for _, b := range s.blocks() {
			add(b)
		}
	}
	for _, b := range p.unplacedBlocks {
		add(b)
	}
	return m
}

// classesAt lists what the pool held live now as allocation classes (one
// per layer, stack, size): the segments and the blocks, for oom-<n>.pb.gz.
func (p *pool) classesAt(pid uint32, start uint64) []Class {
	type key struct {
		layer event.Layer
		stack event.StackID
		api   event.API
		size  uint64
	}
	m := make(map[key]*Usage)
	add := func(k key) {
		u := m[k]
		if u == nil {
			u = &Usage{}
			m[k] = u
		}
		u.Add(k.size)
	}
	for s := range p.segs.all() {
		add(key{event.LayerSegment, s.stack, s.api, s.size})
		for _, b := range s.blocks() {
			add(key{event.LayerBlock, b.stack, b.api, b.size})
		}
	}
	for _, b := range p.unplacedBlocks {
		add(key{event.LayerBlock, b.stack, b.api, b.size})
	}
	out := make([]Class, 0, len(m))
	for k, u := range m {
		out = append(out, Class{PID: pid, ProcessStart: start, Stack: k.stack, Device: p.key.device, API: k.api,
			Layer: k.layer, Space: SpaceDevice, Size: k.size, Alloc: *u, Live: *u, Peak: *u})
	}
	slices.SortFunc(out, func(x, y Class) int {
		return cmp.Or(cmp.Compare(x.Layer, y.Layer), cmp.Compare(x.Stack, y.Stack), cmp.Compare(x.API, y.API),
			cmp.Compare(x.Size, y.Size))
	})
	return out
}

// segmentFailed opens an OOM record for a failed segment allocation while
// the block layer is traced, or closes the open one when this is its retry:
// the same size on the same thread (cudaMalloc), or any failed cuMemCreate
// of the thread (an expandable segment's retry asks for what the flush left
// it to map). request is the bytes the allocator asked for: the cudaMalloc's
// size, or the pages created for the request and the one that failed
// (vmm).
func (a *Analyzer) segmentFailed(p *pool, e *event.Event, request uint64, vmm bool) {
	if !p.blocks {
		return
	}
	p.touch()
	if o := p.open; o != nil && o.Outcome == OOMPending && o.TID == e.TID && o.Expandable == vmm &&
		(vmm || o.RequestBytes == request) {
		o.Outcome = OOMFinal
		o.RetryTime = e.Time
		o.CostNs += e.Duration
		p.open = nil
		return
	}
	p.closeOpen()
	o := &oomRecord{OOM: OOM{Time: e.Time, Device: e.Device, TID: e.TID, Stack: e.Stack, API: e.API, Ret: e.Ret,
		RequestBytes: request, Outcome: OOMPending, CostNs: e.Duration, Expandable: vmm}}
	if vmm {
		o.PagesBytes = request
	}
	p.snapshot(&o.State)
	o.State.Time = e.Time
	o.Kind = OOMCapacity
	if o.State.CachedFreeBytes >= request {
		o.Kind = OOMFragmentation
	}
	o.blockStacks = p.liveBlocksByStack()
	in := a.inst(e.PID)
	o.Live = p.classesAt(in.pid, in.start)
	// The largest segment that serves blocks smaller than the request: the
	// max_split_size_mb remediation must stay above it. Whole free large
	// segments are what garbage collection could have released.
	for s := range p.segs.all() {
		if len(s.blocks()) == 0 && s.size > smallSegment {
			o.geometry.idleLarge += s.size
		}
		for _, b := range s.blocks() {
			if b.size < e.Size {
				o.geometry.maxSharedSegment = max(o.geometry.maxSharedSegment, s.size)
				break
			}
		}
	}
	p.ooms = append(p.ooms, o)
	p.open = o
}

// segmentRetried closes the open OOM record when a successful allocation
// of the same size on the same thread follows it: the allocator's retry
// after freeing its cache worked.
func (p *pool) segmentRetried(e *event.Event) {
	if o := p.open; o != nil && o.Outcome == OOMPending && o.TID == e.TID && o.RequestBytes == e.Size {
		o.Outcome = OOMRetried
		o.RetryTime = e.Time
		o.CostNs += e.Duration
		p.open = nil
	}
}

// reported applies an allocator's report of a request it gave up on
// (event.KindOOMReport) to the failure it follows: the latest OOM record
// the same thread opened in the pool of the report's device. The report
// ends it (the allocator raises next): a pending record is final. A report
// without a traced failure before it (an allocator limit rather than the
// driver's) or after a retry that worked is left out.
func (m *poolModel) reported(e *event.Event) {
	p := m.pools[poolKey{e.PID, e.Device}]
	if p == nil || !p.blocks {
		return
	}
	var o *oomRecord
	for i := len(p.ooms) - 1; i >= 0; i-- {
		if p.ooms[i].TID == e.TID {
			o = p.ooms[i]
			break
		}
	}
	if o == nil || o.Reported != nil || o.Outcome == OOMRetried {
		return
	}
	if p.open == o {
		p.closeOpen()
	}
	o.Reported = &OOMReport{Time: e.Time, RequestBytes: e.Size, AllocatedBytes: e.Addr, ReservedBytes: e.Stream}
	if o.Expandable {
		// The pages asked stop at the first one refused: the request is
		// what failed.
		o.RequestBytes = e.Size
	}
}

// closeOpen ends a pending OOM record without a retry: a block event came
// first, or the stream ended.
func (p *pool) closeOpen() {
	if o := p.open; o != nil {
		if o.Outcome == OOMPending {
			o.Outcome = OOMFinal
		}
		p.open = nil
	}
}

// observe applies a block-layer event or a non-nested device-memory
// segment event to the geometry; ch.Old is the live allocation a free (or
// a replacing allocation) ended, whose device the free may not carry
// (pytorch:free carries only the pointer).
func (m *poolModel) observe(e *event.Event, layer event.Layer, ch *ledger.Change) {
	switch {
	case layer == event.LayerBlock && e.Kind == event.KindAlloc:
		if ch.Verdict == ledger.Added || ch.Verdict == ledger.Replaced {
			m.blocks(m.pool(e.PID, e.Device)).blockAlloc(e)
		}
	case layer == event.LayerBlock && e.Kind == event.KindFree:
		if ch.Verdict == ledger.Freed {
			m.blocks(m.pool(e.PID, ch.Old.Device)).blockFree(e.Time, e.Addr)
		}
	case layer == event.LayerSegment && e.Kind == event.KindAlloc:
		p := m.pool(e.PID, e.Device)
		switch ch.Verdict {
		case ledger.Failed:
			m.failed(p, e, e.Size, false)
		case ledger.Replaced:
			// The allocation its free was missed for: a mapped range or
			// a segment.
			if old := m.pool(e.PID, ch.Old.Device); !old.mapRemove(e.Time, e.Addr, ch.Old.Size, 0) {
				old.segmentFree(e.Time, e.Addr, 0)
			}
			fallthrough
		case ledger.Added:
			p.segmentRetried(e)
			if e.API == event.APICuMemMap {
				// An importer's mapped range (a snapshot's
				// segment_map): merged as a traced cuMemMap is,
				// without the reservations, which snapshots do
				// not record.
				p.mapAdd(e, func(uint64) bool { return false })
				break
			}
			p.segmentAlloc(e)
		}
	case layer == event.LayerSegment && e.Kind == event.KindFree:
		if ch.Verdict != ledger.Freed {
			break
		}
		if e.API == event.APICuMemUnmap {
			m.pool(e.PID, ch.Old.Device).mapRemove(e.Time, e.Addr, ch.Old.Size, e.Duration)
			break
		}
		// segmentFree finds the segment by its exact address.
		m.pool(e.PID, ch.Old.Device).segmentFree(e.Time, e.Addr, e.Duration)
	}
}

// blocks readies a pool for its first block event: its segments, not
// kept until then (a process without a block layer may hold a million, and
// a sorted slice of them costs a copy of the tail at every free), are
// taken from the ledger's live allocations, where every one of them is.
func (m *poolModel) blocks(p *pool) *pool {
	if p.blocks {
		return p
	}
	classes := *m.classes
	var segs []*poolSegment
	m.ledger.All(liveKey(p.key.pid, event.LayerSegment, SpaceDevice), func(k uint64, la ledger.Entry) bool {
		c := classes[la.Tag]
		if c.key.device == p.key.device {
			segs = append(segs, &poolSegment{addr: k, size: c.key.size, stack: c.key.stack, api: c.key.api})
			p.reserved += c.key.size
		}
		return true
	})
	// The mapped ranges (the mapping's stack is not kept: the segment has
	// none), and with the segments an importer gave as mapped, merged where
	// they touch inside a reservation, as mapAdd merges them.
	m.ledger.Mappings(p.key.pid, func(addr, size uint64, device int32) bool {
		if device == p.key.device {
			segs = append(segs, &poolSegment{addr: addr, size: size, api: event.APICuMemMap})
			p.reserved += size
		}
		return true
	})
	slices.SortStableFunc(segs, func(x, y *poolSegment) int { return cmp.Compare(x.addr, y.addr) })
	merged := segs[:0]
	for _, s := range segs {
		if s.mapped() {
			p.expandable = true
		}
		if n := len(merged); n > 0 && s.mapped() && merged[n-1].mapped() && merged[n-1].addr+merged[n-1].size == s.addr &&
			!m.reservationStart(p.key.pid, s.addr) {
			merged[n-1].size += s.size
			continue
		}
		merged = append(merged, s)
	}
	p.segs.build(merged)
	return p
}

// mapped applies a cuMemMap (unmap clear) or a cuMemUnmap to the pools:
// ch is what the ledger made of it. The ranges a call unmapped are
// contiguous from e.Addr (Unmap), or the one at e.Addr a Map replaced.
func (m *poolModel) mapped(e *event.Event, ch *ledger.MapChange, unmap bool) {
	if ch.Verdict != ledger.Mapped {
		return
	}
	addr := e.Addr
	for _, u := range ch.Unmapped {
		m.pool(e.PID, u.Device).mapRemove(e.Time, addr, u.Size, e.Duration)
		addr += u.Size
	}
	if !unmap {
		m.pool(e.PID, ch.Device).mapAdd(e, func(a uint64) bool { return m.reservationStart(e.PID, a) })
	}
}

// created applies a cuMemCreate to the pools: a success is one more page
// of the thread's current request; a failure opens or closes an OOM record
// (see Analyzer.segmentFailed).
func (m *poolModel) created(e *event.Event, ch *ledger.Change) {
	p := m.pool(e.PID, e.Device)
	switch ch.Verdict {
	case ledger.Added, ledger.Replaced:
		p.created(e.TID, e.Size, e.Addr, e.Stack)
	case ledger.Failed:
		request := e.Size
		if p.vmmTID == e.TID {
			request += p.vmmRun
		}
		p.vmmRun = 0
		m.failed(p, e, request, true)
	}
}

// finishPools completes the pools with block events into Result.Pools.
func (a *Analyzer) finishPools(r *Result) {
	type poolID struct {
		pid    uint32
		start  uint64
		device int32
	}
	geos := make(map[poolID][]oomGeometry)
	a.oomGeometry = make(map[int]oomGeometry)
	for _, p := range a.pools.pools {
		if !p.blocks {
			continue
		}
		p.touch()
		p.closeOpen()
		in := a.inst(p.key.pid)
		fp := Pool{PID: in.pid, ProcessStart: in.start, Device: p.key.device, Expandable: p.expandable}
		if p.worst != nil {
			w := *p.worst
			fp.Worst = &w
		}
		fp.AtEnd.Time = a.latest
		p.snapshot(&fp.AtEnd)
		geo := make([]oomGeometry, 0, len(p.ooms))
		for _, o := range p.ooms {
			c := o.OOM
			c.LiveStacks = topStacks(o.blockStacks, a.opts.TopStacks)
			fp.OOMs = append(fp.OOMs, c)
			geo = append(geo, o.geometry)
		}
		geos[poolID{fp.PID, fp.ProcessStart, fp.Device}] = geo
		r.Pools = append(r.Pools, fp)
	}
	slices.SortFunc(r.Pools, func(x, y Pool) int {
		return cmp.Or(cmp.Compare(x.PID, y.PID), cmp.Compare(x.ProcessStart, y.ProcessStart), cmp.Compare(x.Device, y.Device))
	})
	n := 0
	for i := range r.Pools {
		for j := range r.Pools[i].OOMs {
			n++
			r.Pools[i].OOMs[j].Index = n
			pl := &r.Pools[i]
			a.oomGeometry[n] = geos[poolID{pl.PID, pl.ProcessStart, pl.Device}][j]
		}
	}
}

// OOMProfileName is the file the CLI writes what was live at an OOM into,
// in the output directory: "oom-<Index>.pb.gz".
func OOMProfileName(o *OOM) string {
	return OOMProfileFile(fmt.Sprint(o.Index))
}

// OOMProfileFile is the name of the OOM profile numbered n; the help gives
// it "<n>".
func OOMProfileFile(n string) string {
	return "oom-" + n + ".pb.gz"
}

// AtOOM returns a view of r whose allocation classes are what the failing
// pool held at o (segments and blocks, live and "peak" alike): profile.Build
// on it gives oom-<n>.pb.gz. The view shares everything else with r and,
// like r, must not be changed.
func (r *Result) AtOOM(o *OOM) *Result {
	v := *r
	v.Classes = o.Live
	return &v
}
