package analysis

import (
	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// bookModel is the per-API books (the runtime's and the driver's), per
// process instance and overall, with their own live allocations: a book
// counts nested calls (the driver call inside a runtime call), which the
// ledger leaves out because the outer call already counts the memory.
type bookModel struct {
	books map[bookKey]*bookState
	live  ledger.Tables[bookSpace, uint64]
	// all caches the all-process books by driver (0 runtime, 1 driver);
	// last the latest process's, lastPID its instance id (the hot path).
	all     [2]*bookState
	last    [2]*bookState
	lastPID [2]uint32
}

func newBookModel() *bookModel { return &bookModel{books: make(map[bookKey]*bookState)} }

// observe counts a device-memory call in its API's book, nested or not:
// allocations and frees (cudaMalloc*, cuMemAlloc*, cudaFree*, cuMemFree*)
// and physical memory (cuMemCreate, cuMemRelease). Calls of an unknown API
// belong to neither book; host and VMM range calls are not device memory
// books and are left out.
func (m *bookModel) observe(e *event.Event) {
	var physical bool
	switch e.Kind {
	case event.KindAlloc, event.KindFree:
	case event.KindCreate, event.KindRelease:
		physical = true
	default:
		return
	}
	if e.API == event.APIUnknown {
		return
	}
	driver := e.API.Driver()
	// The process's book and the all-process one change together; written
	// out, not through a closure per field: this runs for every call.
	per, all := m.pair(e.PID, driver)
	bs := bookSpace{pid: e.PID, driver: driver, physical: physical}
	switch e.Kind {
	case event.KindAlloc, event.KindCreate:
		switch {
		case e.Ret != 0:
			per.book.FailedAllocations++
			all.book.FailedAllocations++
			return
		case e.Size == 0 || e.Addr == 0:
			return
		}
		slot := m.live.Get(bs, true).Ref(e.Addr)
		if old := *slot; old != 0 {
			// A free was missed, as in the totals: the old one goes.
			per.level.sub(old)
			all.level.sub(old)
		}
		*slot = e.Size
		per.book.Allocations++
		all.book.Allocations++
		per.book.AllocatedBytes += e.Size
		all.book.AllocatedBytes += e.Size
		per.level.add(e.Size, e.Time)
		all.level.add(e.Size, e.Time)
	default:
		switch {
		case e.Ret != 0:
			per.book.FailedFrees++
			all.book.FailedFrees++
			return
		case e.Addr == 0:
			return
		}
		size, ok := m.live.Get(bs, false).Take(e.Addr)
		if !ok {
			per.book.UnknownFrees++
			all.book.UnknownFrees++
			return
		}
		per.book.Frees++
		all.book.Frees++
		per.level.sub(size)
		all.level.sub(size)
	}
}

// pair returns a process's book and the all-process one of an API,
// creating them: the cached ones without a call of state each (this runs
// for every call).
func (m *bookModel) pair(pid uint32, driver bool) (per, all *bookState) {
	d := 0
	if driver {
		d = 1
	}
	if per, all = m.last[d], m.all[d]; per != nil && all != nil && m.lastPID[d] == pid {
		return per, all
	}
	return m.states(pid, driver)
}

// states is pair past the cache.
func (m *bookModel) states(pid uint32, driver bool) (per, all *bookState) {
	return m.state(bookKey{pid: pid, driver: driver}), m.state(bookKey{all: true, driver: driver})
}

// state returns a book, creating it.
func (m *bookModel) state(k bookKey) *bookState {
	d := 0
	if k.driver {
		d = 1
	}
	switch {
	case k.all && k.pid == 0 && m.all[d] != nil:
		return m.all[d]
	case !k.all && m.last[d] != nil && m.lastPID[d] == k.pid:
		return m.last[d]
	}
	b := m.books[k]
	if b == nil {
		b = &bookState{}
		m.books[k] = b
	}
	switch {
	case k.all && k.pid == 0:
		m.all[d] = b
	case !k.all:
		m.last[d], m.lastPID[d] = b, k.pid
	}
	return b
}

// retire takes instance id's live bytes out of the all-process books.
func (m *bookModel) retire(id uint32) {
	for _, driver := range []bool{false, true} {
		if b := m.books[bookKey{pid: id, driver: driver}]; b != nil {
			m.state(bookKey{all: true, driver: driver}).level.sub(b.level.live)
		}
	}
}

// finish returns the books of one process, or of all when all is set.
func (m *bookModel) finish(pid uint32, all bool) Books {
	get := func(driver bool) Book {
		b := m.books[bookKey{pid: pid, all: all, driver: driver}]
		if b == nil {
			return Book{}
		}
		out := b.book
		out.PeakBytes, out.PeakTime, out.LiveBytesAtEnd = b.level.peak, b.level.peakTime, b.level.live
		return out
	}
	return Books{Runtime: get(false), Driver: get(true)}
}
