package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// TestMemorySpaceIsLedgerSpace pins the conversion liveKey relies on: a
// MemorySpace is the ledger's Space of the same name.
func TestMemorySpaceIsLedgerSpace(t *testing.T) {
	assert.Equal(t, ledger.Device, ledger.Space(SpaceDevice))
	assert.Equal(t, ledger.Physical, ledger.Space(SpacePhysical))
	assert.Equal(t, ledger.Host, ledger.Space(SpaceHost))
	assert.Equal(t, ledger.DeviceScope, ledgerScope(deviceScope))
	assert.Equal(t, ledger.Scope{Layer: hostScope.layer, Host: true}, ledgerScope(hostScope))
}

// recorder is a liveObserver that keeps what it is fed.
type recorder struct{ got []liveChange }

func (r *recorder) changed(c *liveChange) { r.got = append(r.got, *c) }

// TestLiveObserversSeeEveryChange feeds a missed free and two physical
// handles freed by one unmap, and checks the changes a liveObserver sees,
// in order, with the process's live bytes after each: the intermediate
// values come from the ledger (a missed free is a let-go change at the
// level less the new allocation, then the new one; one unmap freeing two
// handles is two changes, each at its own level).
func TestLiveObserversSeeEveryChange(t *testing.T) {
	a := New(Options{})
	rec := &recorder{}
	a.live = append(a.live, rec)
	add := func(e *event.Event) {
		t.Helper()
		e.PID, e.Layer = 100, event.LayerSegment
		require.NoError(t, a.Add(e))
	}
	require.NoError(t, a.Add(&event.Header{Version: 1, Start: 0}))
	add(&event.Event{Time: 1, Kind: event.KindAlloc, API: event.APICudaMalloc, Addr: 0x1000, Size: 4 * MiB, Stack: 1})
	// Same address, no free seen: 4 MiB let go, then 1 MiB live.
	add(&event.Event{Time: 2, Kind: event.KindAlloc, API: event.APICudaMalloc, Addr: 0x1000, Size: MiB, Stack: 2})
	add(&event.Event{Time: 3, Kind: event.KindCreate, API: event.APICuMemCreate, Addr: 0xa1, Size: 2 * MiB})
	add(&event.Event{Time: 4, Kind: event.KindCreate, API: event.APICuMemCreate, Addr: 0xa2, Size: 2 * MiB})
	add(&event.Event{Time: 5, Kind: event.KindMap, API: event.APICuMemMap, Addr: 0x9000000, Size: 2 * MiB, Stream: 0xa1})
	add(&event.Event{Time: 6, Kind: event.KindMap, API: event.APICuMemMap, Addr: 0x9200000, Size: 2 * MiB, Stream: 0xa2})
	add(&event.Event{Time: 7, Kind: event.KindRelease, API: event.APICuMemRelease, Addr: 0xa1})
	add(&event.Event{Time: 8, Kind: event.KindRelease, API: event.APICuMemRelease, Addr: 0xa2})
	// One unmap over both ranges: both handles go.
	add(&event.Event{Time: 9, Kind: event.KindUnmap, API: event.APICuMemUnmap, Addr: 0x9000000, Size: 4 * MiB})

	type step struct {
		alloc, replaced bool
		time, born      uint64
		size, live      uint64
		mem             MemorySpace
	}
	want := []step{
		{alloc: true, time: 1, born: 1, size: 4 * MiB, live: 4 * MiB, mem: SpaceDevice},
		{replaced: true, time: 2, born: 1, size: 4 * MiB, live: 0, mem: SpaceDevice},
		{alloc: true, time: 2, born: 2, size: MiB, live: MiB, mem: SpaceDevice},
		{alloc: true, time: 3, born: 3, size: 2 * MiB, live: 3 * MiB, mem: SpacePhysical},
		{alloc: true, time: 4, born: 4, size: 2 * MiB, live: 5 * MiB, mem: SpacePhysical},
		{time: 9, born: 3, size: 2 * MiB, live: 3 * MiB, mem: SpacePhysical},
		{time: 9, born: 4, size: 2 * MiB, live: MiB, mem: SpacePhysical},
	}
	got := make([]step, len(rec.got))
	for i, c := range rec.got {
		got[i] = step{c.alloc, c.replaced, c.time, c.born, c.size, c.live, c.mem}
		assert.Equal(t, deviceScope, c.sc, "change %d", i)
	}
	assert.Equal(t, want, got)
	// The sequence numbers are the events': the missed free and its
	// replacement are one event, the unmap's two changes another.
	assert.Equal(t, rec.got[1].seq, rec.got[2].seq)
	assert.Equal(t, rec.got[5].seq, rec.got[6].seq)
	assert.Equal(t, uint64(9), rec.got[6].seq)
}

// TestWatchSeesEveryChange feeds TestLiveObserversSeeEveryChange's stream
// to a watcher (Options.Watch), a reused PID after it, and checks what it
// is told beyond the liveObservers: the process and its instance, the
// address (a physical allocation's handle, even when an unmap freed it),
// the stack and the API.
func TestWatchSeesEveryChange(t *testing.T) {
	type seen struct {
		alloc, replaced bool
		pid, inst       uint32
		addr, size      uint64
		api             event.API
		stack           event.StackID
		live, devLive   uint64
	}
	var got []seen
	a := New(Options{Watch: func(c *Change) {
		got = append(got, seen{c.Alloc, c.Replaced, c.PID, c.Instance, c.Addr, c.Size, c.API, c.Stack, c.Live, c.DeviceLive})
	}})
	add := func(e *event.Event) {
		t.Helper()
		e.PID, e.Layer = 100, event.LayerSegment
		require.NoError(t, a.Add(e))
	}
	require.NoError(t, a.Add(&event.Header{Version: 1, Start: 0}))
	require.NoError(t, a.Add(&event.Process{PID: 100, Time: 0}))
	add(&event.Event{Time: 1, Kind: event.KindAlloc, API: event.APICudaMalloc, Addr: 0x1000, Size: 4 * MiB, Stack: 1})
	add(&event.Event{Time: 2, Kind: event.KindAlloc, API: event.APICudaMalloc, Addr: 0x1000, Size: MiB, Stack: 2})
	add(&event.Event{Time: 3, Kind: event.KindCreate, API: event.APICuMemCreate, Addr: 0xa1, Size: 2 * MiB, Stack: 3})
	add(&event.Event{Time: 5, Kind: event.KindMap, API: event.APICuMemMap, Addr: 0x9000000, Size: 2 * MiB, Stream: 0xa1})
	add(&event.Event{Time: 7, Kind: event.KindRelease, API: event.APICuMemRelease, Addr: 0xa1})
	add(&event.Event{Time: 9, Kind: event.KindUnmap, API: event.APICuMemUnmap, Addr: 0x9000000, Size: 2 * MiB})
	// PID 100 again, a new process (it exec'd): its memory is its own.
	require.NoError(t, a.Add(&event.Process{PID: 100, Time: 10}))
	add(&event.Event{Time: 11, Kind: event.KindAlloc, API: event.APICuMemAlloc, Addr: 0x1000, Size: 8 * MiB, Stack: 4})
	a.Finish()

	reused := got[len(got)-1].inst
	assert.NotEqual(t, uint32(100), reused, "a reused PID's instance has its own id")
	assert.Equal(t, []seen{
		{alloc: true, pid: 100, inst: 100, addr: 0x1000, size: 4 * MiB, api: event.APICudaMalloc, stack: 1, live: 4 * MiB, devLive: 4 * MiB},
		{replaced: true, pid: 100, inst: 100, addr: 0x1000, size: 4 * MiB, api: event.APICudaMalloc, stack: 1},
		{alloc: true, pid: 100, inst: 100, addr: 0x1000, size: MiB, api: event.APICudaMalloc, stack: 2, live: MiB, devLive: MiB},
		{alloc: true, pid: 100, inst: 100, addr: 0xa1, size: 2 * MiB, api: event.APICuMemCreate, stack: 3, live: 3 * MiB, devLive: 3 * MiB},
		{pid: 100, inst: 100, addr: 0xa1, size: 2 * MiB, api: event.APICuMemCreate, stack: 3, live: MiB, devLive: MiB},
		{alloc: true, pid: 100, inst: reused, addr: 0x1000, size: 8 * MiB, api: event.APICuMemAlloc, stack: 4, live: 8 * MiB, devLive: 8 * MiB},
	}, got)
}
