package ledger

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

const mib = 1 << 20

func ev(kind event.Kind, pid uint32, addr, size, t uint64) *event.Event {
	return &event.Event{Kind: kind, PID: pid, Addr: addr, Size: size, Time: t, Layer: event.LayerSegment}
}

// TestAllocFree walks one key space through the verdicts, checking its
// level and the device scope's after each call.
func TestAllocFree(t *testing.T) {
	l := New()
	k := Key{Inst: 1, Layer: event.LayerSegment, Space: Device}
	failed := ev(event.KindAlloc, 1, 0, 4*mib, 1)
	failed.Ret = 2
	failedFree := ev(event.KindFree, 1, 0x1000, 0, 9)
	failedFree.Ret = 1
	for _, step := range []struct {
		name       string
		free       bool
		e          *event.Event
		verdict    Verdict
		old        uint64 // Old.Size
		live, peak uint64
		count      uint64
	}{
		{"failed: never live", false, failed, Failed, 0, 0, 0, 0},
		{"zero bytes", false, ev(event.KindAlloc, 1, 0x1000, 0, 2), Empty, 0, 0, 0, 0},
		{"no address", false, ev(event.KindAlloc, 1, 0, 8, 3), NoAddr, 0, 0, 0, 0},
		{"alloc", false, ev(event.KindAlloc, 1, 0x1000, 10*mib, 4), Added, 0, 10 * mib, 10 * mib, 1},
		{"second", false, ev(event.KindAlloc, 1, 0x2000, 6*mib, 5), Added, 0, 16 * mib, 16 * mib, 2},
		{"missed free: replaced", false, ev(event.KindAlloc, 1, 0x1000, 2*mib, 6), Replaced, 10 * mib, 8 * mib, 16 * mib, 2},
		{"free", true, ev(event.KindFree, 1, 0x2000, 0, 7), Freed, 6 * mib, 2 * mib, 16 * mib, 1},
		{"double free", true, ev(event.KindFree, 1, 0x2000, 0, 8), Unknown, 0, 2 * mib, 16 * mib, 1},
		{"failed free", true, failedFree, Failed, 0, 2 * mib, 16 * mib, 1},
		{"null free", true, ev(event.KindFree, 1, 0, 0, 10), NoAddr, 0, 2 * mib, 16 * mib, 1},
	} {
		var ch Change
		if step.free {
			ch = l.Free(k, step.e)
		} else {
			ch = l.Alloc(k, step.e)
		}
		assert.Equal(t, step.verdict, ch.Verdict, step.name)
		assert.Equal(t, step.old, ch.Old.Size, step.name)
		lv := l.Level(k)
		assert.Equal(t, step.live, lv.Bytes, "live after %s", step.name)
		assert.Equal(t, step.count, lv.Count, "count after %s", step.name)
		assert.Equal(t, step.peak, lv.Peak, "peak after %s", step.name)
		assert.Equal(t, lv, l.ScopeLevel(DeviceScope), "one process: the scope is its key space, after %s", step.name)
	}
	assert.Equal(t, uint64(5), l.Level(k).PeakTime, "the peak was first reached by the second alloc")
	e, ok := l.Get(k, 0x1000)
	require.True(t, ok)
	assert.Equal(t, Entry{Time: 6, Size: 2 * mib}, e)
}

// TestTag: the caller's tag stays with the entry.
func TestTag(t *testing.T) {
	l := New()
	k := Key{Inst: 7, Layer: event.LayerBlock}
	ch := l.Alloc(k, ev(event.KindAlloc, 7, 0x40, 64, 1))
	ch.New.Tag = 42
	l.Alloc(k, ev(event.KindAlloc, 7, 0x80, 64, 2)) // may move the table
	e, ok := l.Get(k, 0x40)
	require.True(t, ok)
	assert.Equal(t, int32(42), e.Tag)
	var n int
	l.All(k, func(uint64, Entry) bool { n++; return true })
	assert.Equal(t, 2, n)
	assert.Equal(t, uint64(128), l.ScopeLevel(Scope{Layer: event.LayerBlock}).Bytes)
	assert.Zero(t, l.ScopeLevel(DeviceScope).Bytes, "blocks are not segments")
}

// TestPhysicalOutlivesRelease: physical memory released while mapped stays
// live until its last mapping goes (cuMemRelease, then cuMemUnmap, as
// PyTorch's expandable segments do).
func TestPhysicalOutlivesRelease(t *testing.T) {
	l := New()
	const h1, h2 = 0xa1, 0xa2
	phys := Key{Inst: 1, Layer: event.LayerSegment, Space: Physical}
	create := func(h uint64, size, t uint64) *event.Event {
		e := ev(event.KindCreate, 1, h, size, t)
		e.Device = 3
		return e
	}
	mapOf := func(addr, size, h, t uint64) *event.Event {
		e := ev(event.KindMap, 1, addr, size, t)
		e.Stream = h
		return e
	}
	require.Equal(t, Added, l.Create(1, create(h1, 2*mib, 1)).Verdict)
	require.Equal(t, Added, l.Create(1, create(h2, 4*mib, 2)).Verdict)
	m := l.Map(1, mapOf(0x7000000, 2*mib, h1, 3))
	require.Equal(t, Mapped, m.Verdict)
	assert.Equal(t, int32(3), m.Device, "a mapping is on its handle's device")
	require.Equal(t, Mapped, l.Map(1, mapOf(0x7000000+2*mib, 4*mib, h2, 4)).Verdict)

	assert.Equal(t, Kept, l.Release(1, ev(event.KindRelease, 1, h1, 0, 5)).Verdict)
	assert.Equal(t, Kept, l.Release(1, ev(event.KindRelease, 1, h2, 0, 6)).Verdict)
	assert.Equal(t, uint64(6*mib), l.ScopeLevel(DeviceScope).Bytes, "released but mapped: still live")
	assert.Equal(t, Unknown, l.Release(1, ev(event.KindRelease, 1, h1, 0, 7)).Verdict, "released twice")

	// One unmap over both ranges frees both handles, in address order.
	u := l.Unmap(1, ev(event.KindUnmap, 1, 0x7000000, 6*mib, 8))
	require.Equal(t, Mapped, u.Verdict)
	require.Len(t, u.Unmapped, 2)
	// Each carries the instance's level just after it: 6 MiB less 2, then
	// less 4 more; the peak is both handles' 6 MiB, reached at 2. Each
	// names the handle its range mapped.
	assert.Equal(t, Unmapping{Size: 2 * mib, Device: 3, Freed: true, Old: Entry{Time: 1, Size: 2 * mib, Device: 3},
		Inst: Level{Count: 1, Bytes: 4 * mib, Peak: 6 * mib, PeakTime: 2}, Handle: h1}, u.Unmapped[0])
	assert.Equal(t, Unmapping{Size: 4 * mib, Device: 3, Freed: true, Old: Entry{Time: 2, Size: 4 * mib, Device: 3},
		Inst: Level{Peak: 6 * mib, PeakTime: 2}, Handle: h2}, u.Unmapped[1])
	assert.Equal(t, Level{Peak: 6 * mib, PeakTime: 2}, l.Level(phys))
	assert.Equal(t, Unknown, l.Unmap(1, ev(event.KindUnmap, 1, 0x7000000, 6*mib, 9)).Verdict)

	// Unmapped first, released after: freed at the release.
	l.Create(1, create(h1, mib, 10))
	l.Map(1, mapOf(0x8000000, mib, h1, 11))
	u = l.Unmap(1, ev(event.KindUnmap, 1, 0x8000000, mib, 12))
	assert.False(t, u.Unmapped[0].Freed, "not released yet")
	ch := l.Release(1, ev(event.KindRelease, 1, h1, 0, 13))
	assert.Equal(t, Freed, ch.Verdict)
	assert.Equal(t, uint64(mib), ch.Old.Size)
	assert.Zero(t, l.ScopeLevel(DeviceScope).Bytes)
}

// TestInstances: a PID's second Process record after events starts a new
// instance; the old one's memory leaves the all-process level, its own
// level stays.
func TestInstances(t *testing.T) {
	l := New()
	in, old := l.Process(&event.Process{PID: 5, Time: 10, Command: []string{"a"}})
	require.Nil(t, old)
	assert.Equal(t, uint32(5), in.ID, "a PID's first instance is keyed by the PID")
	// A second record before any event describes the same instance.
	in, old = l.Process(&event.Process{PID: 5, Time: 11, Command: []string{"b"}})
	require.Nil(t, old)
	assert.Equal(t, []string{"b"}, in.Info.Command)

	id := l.Active(5, 20)
	require.Equal(t, uint32(5), id)
	l.Alloc(Key{Inst: id, Layer: event.LayerSegment}, ev(event.KindAlloc, 5, 0x1000, 8*mib, 20))
	l.Alloc(Key{Inst: l.Active(6, 21), Layer: event.LayerSegment}, ev(event.KindAlloc, 6, 0x1000, mib, 21))
	assert.Equal(t, uint64(9*mib), l.ScopeLevel(DeviceScope).Bytes)

	in, old = l.Process(&event.Process{PID: 5, Time: 30, Command: []string{"c"}})
	require.NotNil(t, old)
	assert.Equal(t, uint32(5), old.ID)
	assert.Equal(t, uint64(30), old.SupersededAt)
	assert.Equal(t, ReusedBase, in.ID)
	assert.Equal(t, uint64(mib), l.ScopeLevel(DeviceScope).Bytes, "the exited instance's 8 MiB left")
	assert.Equal(t, uint64(9*mib), l.ScopeLevel(DeviceScope).Peak)
	assert.Equal(t, uint64(8*mib), l.Level(Key{Inst: 5, Layer: event.LayerSegment}).Bytes, "what it leaked stays its own")
	assert.Equal(t, ReusedBase, l.Active(5, 31))
	cur, ok := l.Current(5)
	assert.True(t, ok)
	assert.Equal(t, ReusedBase, cur)
	require.Len(t, l.Instances(), 3)
	assert.Equal(t, []uint32{5, 6, ReusedBase}, []uint32{l.Instances()[0].ID, l.Instances()[1].ID, l.Instances()[2].ID})
}

// TestApply feeds records as the status line does.
func TestApply(t *testing.T) {
	l := New()
	nested := ev(event.KindAlloc, 1, 0x9000, 7*mib, 1)
	nested.Flags = event.FlagNested
	block := ev(event.KindAlloc, 1, 0x1000, 3*mib, 2)
	block.Layer = event.LayerBlock
	unset := ev(event.KindAlloc, 1, 0x2000, 5*mib, 3)
	unset.Layer = event.LayerUnknown
	mapped := ev(event.KindMap, 1, 0x7000, 2*mib, 6)
	mapped.Stream = 0x1000
	for _, step := range []struct {
		name       string
		rec        event.Record
		live, peak uint64
	}{
		{"nested: counted by its outer call", nested, 0, 0},
		{"block: inside segments", block, 0, 0},
		{"unset layer is a segment", unset, 5 * mib, 5 * mib},
		{"pinned host memory is not device memory", ev(event.KindHostAlloc, 1, 0x3000, 64*mib, 4), 5 * mib, 5 * mib},
		{"physical memory, handle equal to a pointer", ev(event.KindCreate, 1, 0x1000, 2*mib, 5), 7 * mib, 7 * mib},
		{"mapped", mapped, 7 * mib, 7 * mib},
		{"released while mapped", ev(event.KindRelease, 1, 0x1000, 0, 7), 7 * mib, 7 * mib},
		{"unmapped: freed", ev(event.KindUnmap, 1, 0x7000, 2*mib, 8), 5 * mib, 7 * mib},
		{"other records change nothing", &event.Sample{Device: 0, UsedBytes: 1}, 5 * mib, 7 * mib},
	} {
		l.Apply(step.rec)
		lv := l.ScopeLevel(DeviceScope)
		assert.Equal(t, step.live, lv.Bytes, "live after %s", step.name)
		assert.Equal(t, step.peak, lv.Peak, "peak after %s", step.name)
	}
	assert.Equal(t, uint64(3*mib), l.ScopeLevel(Scope{Layer: event.LayerBlock}).Bytes)
	assert.Equal(t, uint64(64*mib), l.ScopeLevel(Scope{Layer: event.LayerSegment, Host: true}).Bytes)
}

// TestImplied: a checkpoint's summary implies an instance without marking
// it active, so a later Process record still describes it.
func TestImplied(t *testing.T) {
	l := New()
	id := l.Implied(9, 5)
	assert.Equal(t, uint32(9), id)
	assert.False(t, l.Instance(9).Active)
	in, old := l.Process(&event.Process{PID: 9, Time: 3})
	assert.Nil(t, old)
	assert.Equal(t, uint32(9), in.ID)
	assert.Equal(t, uint64(3), in.Start, "the record's earlier time")
	assert.Equal(t, uint32(9), l.Active(9, 6))
	assert.True(t, l.Instance(9).Active)
}

// TestInstanceLevel checks the per-instance levels: device and physical
// memory share the instance's device scope, pinned host memory has its
// own, each change's Inst is the level after it, and a superseded
// instance keeps its level while it leaves the all-process one.
func TestInstanceLevel(t *testing.T) {
	l := New()
	dev := Key{Inst: 1, Layer: event.LayerSegment, Space: Device}
	host := Key{Inst: 1, Layer: event.LayerSegment, Space: Host}
	hostScope := Scope{Layer: event.LayerSegment, Host: true}

	ch := l.Alloc(dev, ev(event.KindAlloc, 1, 0x1000, 2*mib, 1))
	require.Equal(t, Added, ch.Verdict)
	assert.Equal(t, Level{Count: 1, Bytes: 2 * mib, Peak: 2 * mib, PeakTime: 1}, *ch.Inst)
	ch = l.Create(1, ev(event.KindCreate, 1, 0xa1, 4*mib, 2))
	assert.Equal(t, Level{Count: 2, Bytes: 6 * mib, Peak: 6 * mib, PeakTime: 2}, *ch.Inst, "physical memory counts with device memory")
	l.Alloc(host, ev(event.KindHostAlloc, 1, 0x2000, mib, 3))
	assert.Equal(t, Level{Count: 1, Bytes: mib, Peak: mib, PeakTime: 3}, l.InstanceLevel(1, hostScope))

	// A missed free: the level after counts the new allocation only.
	ch = l.Alloc(dev, ev(event.KindAlloc, 1, 0x1000, mib, 4))
	require.Equal(t, Replaced, ch.Verdict)
	assert.Equal(t, Level{Count: 2, Bytes: 5 * mib, Peak: 6 * mib, PeakTime: 2}, *ch.Inst)
	ch = l.Free(dev, ev(event.KindFree, 1, 0x1000, 0, 5))
	require.Equal(t, Freed, ch.Verdict)
	assert.Equal(t, Level{Count: 1, Bytes: 4 * mib, Peak: 6 * mib, PeakTime: 2}, *ch.Inst)

	// PID 1 runs again: the old instance keeps its 4 MiB, the
	// all-process level drops it, the new instance starts at zero.
	l.Process(&event.Process{PID: 1, Time: 6})
	l.Active(1, 6)
	l.Process(&event.Process{PID: 1, Time: 7})
	id, _ := l.Current(1)
	require.NotEqual(t, uint32(1), id)
	assert.Equal(t, uint64(4*mib), l.InstanceLevel(1, DeviceScope).Bytes)
	assert.Equal(t, uint64(0), l.ScopeLevel(DeviceScope).Bytes)
	assert.Equal(t, Level{}, l.InstanceLevel(id, DeviceScope))
}

// TestChangeReused drives AllocTo and FreeTo with one Change, as the
// analysis does: each call sets every field, so nothing of the previous
// call (a replaced allocation, a level) is left in a failed one.
func TestChangeReused(t *testing.T) {
	l := New()
	k := Key{Inst: 1, Layer: event.LayerSegment, Space: Device}
	var ch Change
	l.AllocTo(&ch, k, ev(event.KindAlloc, 1, 0x1000, 2*mib, 1))
	require.Equal(t, Added, ch.Verdict)
	l.AllocTo(&ch, k, ev(event.KindAlloc, 1, 0x1000, mib, 2))
	require.Equal(t, Replaced, ch.Verdict)
	assert.Equal(t, Entry{Time: 1, Size: 2 * mib}, ch.Old)
	assert.Equal(t, Entry{Time: 2, Size: mib}, *ch.New)
	failed := ev(event.KindAlloc, 1, 0x2000, mib, 3)
	failed.Ret = 2
	l.AllocTo(&ch, k, failed)
	assert.Equal(t, Change{Verdict: Failed}, ch)
	l.FreeTo(&ch, k, ev(event.KindFree, 1, 0x1000, 0, 4))
	require.Equal(t, Freed, ch.Verdict)
	assert.Equal(t, Entry{Time: 2, Size: mib}, ch.Old)
	assert.Equal(t, Level{Peak: 2 * mib, PeakTime: 1}, *ch.Inst)
	l.FreeTo(&ch, k, ev(event.KindFree, 1, 0x1000, 0, 5))
	assert.Equal(t, Change{Verdict: Unknown}, ch, "freed twice")
}

// TestTagMapping: a mapping's tag comes back with the Unmapping that
// removes it, whether an unmap or a map over it removed it.
func TestTagMapping(t *testing.T) {
	l := New()
	mapOf := func(addr, size, t uint64) *event.Event {
		e := ev(event.KindMap, 1, addr, size, t)
		e.Stream = 0xa1
		return e
	}
	assert.False(t, l.TagMapping(1, 0x7000000, 5), "nothing mapped yet")
	l.Map(1, mapOf(0x7000000, mib, 1))
	l.Map(1, mapOf(0x7000000+mib, mib, 2))
	require.True(t, l.TagMapping(1, 0x7000000, 5))
	require.True(t, l.TagMapping(1, 0x7000000+mib, 6))
	m := l.Map(1, mapOf(0x7000000+mib, mib, 3)) // its unmap was missed
	require.Len(t, m.Unmapped, 1)
	assert.Equal(t, int32(6), m.Unmapped[0].Tag)
	u := l.Unmap(1, ev(event.KindUnmap, 1, 0x7000000, 2*mib, 4))
	require.Len(t, u.Unmapped, 2)
	assert.Equal(t, []int32{5, 0}, []int32{u.Unmapped[0].Tag, u.Unmapped[1].Tag}, "the second mapping was not tagged")
}

// TestForget: a superseded instance's allocations, handles and mappings
// go; the current instance's stay, and Forget of it does nothing.
func TestForget(t *testing.T) {
	l := New()
	l.Process(&event.Process{PID: 9, Time: 1})
	old := l.Active(9, 2)
	k := Key{Inst: old, Layer: event.LayerSegment, Space: Device}
	l.Alloc(k, ev(event.KindAlloc, 9, 0x1000, mib, 3))
	l.Create(old, ev(event.KindCreate, 9, 0xa1, 2*mib, 4))
	m := ev(event.KindMap, 9, 0x7000000, 2*mib, 5)
	m.Stream = 0xa1
	l.Map(old, m)
	l.Forget(old)
	_, ok := l.Get(k, 0x1000)
	assert.True(t, ok, "current: not forgotten")

	in, sup := l.Process(&event.Process{PID: 9, Time: 6})
	require.NotNil(t, sup)
	l.Forget(old)
	_, ok = l.Get(k, 0x1000)
	assert.False(t, ok, "superseded: forgotten")
	assert.Zero(t, l.Level(k))
	assert.Zero(t, l.InstanceLevel(old, DeviceScope))
	assert.Equal(t, Unknown, l.Release(old, ev(event.KindRelease, 9, 0xa1, 0, 7)).Verdict, "its handle went")
	assert.Equal(t, Unknown, l.Unmap(old, ev(event.KindUnmap, 9, 0x7000000, 2*mib, 8)).Verdict, "its mapping went")
	assert.Zero(t, l.ScopeLevel(DeviceScope).Bytes)

	// The new instance keeps its own.
	nk := Key{Inst: in.ID, Layer: event.LayerSegment, Space: Device}
	l.Alloc(nk, ev(event.KindAlloc, 9, 0x1000, mib, 9))
	assert.Equal(t, uint64(mib), l.ScopeLevel(DeviceScope).Bytes)
}
