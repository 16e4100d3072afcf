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
