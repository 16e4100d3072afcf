package analysis

import "github.com/vramprof/vramprof/probes/event"

// book counts a device-memory call in its API's ledger, nested or not:
// allocations and frees (cudaMalloc*, cuMemAlloc*, cudaFree*, cuMemFree*)
// and physical memory (cuMemCreate, cuMemRelease). Calls of an unknown API
// belong to neither book; host and VMM range calls are not device memory
// ledgers and are left out.
func (a *Analyzer) book(e *event.Event) {
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
	per := a.bookState(bookKey{pid: e.PID, driver: driver})
	all := a.bookState(bookKey{all: true, driver: driver})
	each := func(f func(b *bookState)) { f(per); f(all) }
	bs := bookSpace{pid: e.PID, driver: driver, physical: physical}
	switch e.Kind {
	case event.KindAlloc, event.KindCreate:
		switch {
		case e.Ret != 0:
			each(func(b *bookState) { b.book.FailedAllocations++ })
			return
		case e.Size == 0 || e.Addr == 0:
			return
		}
		live := a.bookLive.Get(bs, true)
		if old, ok := live.Get(e.Addr); ok {
			// A free was missed, as in the totals: the old one goes.
			each(func(b *bookState) { b.level.sub(old) })
		}
		live.Put(e.Addr, e.Size)
		each(func(b *bookState) {
			b.book.Allocations++
			b.book.AllocatedBytes += e.Size
			b.level.add(e.Size, e.Time)
		})
	default:
		switch {
		case e.Ret != 0:
			each(func(b *bookState) { b.book.FailedFrees++ })
			return
		case e.Addr == 0:
			return
		}
		live := a.bookLive.Get(bs, false)
		size, ok := live.Get(e.Addr)
		if !ok {
			each(func(b *bookState) { b.book.UnknownFrees++ })
			return
		}
		live.Del(e.Addr)
		each(func(b *bookState) {
			b.book.Frees++
			b.level.sub(size)
		})
	}
}

func (a *Analyzer) bookState(k bookKey) *bookState {
	b := a.books[k]
	if b == nil {
		b = &bookState{}
		a.books[k] = b
	}
	return b
}

// finishBooks returns the books of one process, or of all when all is set.
func (a *Analyzer) finishBooks(pid uint32, all bool) Books {
	get := func(driver bool) Book {
		b := a.books[bookKey{pid: pid, all: all, driver: driver}]
		if b == nil {
			return Book{}
		}
		out := b.book
		out.PeakBytes, out.PeakTime, out.LiveBytesAtEnd = b.level.peak, b.level.peakTime, b.level.live
		return out
	}
	return Books{Runtime: get(false), Driver: get(true)}
}
