package analysis

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis/checkpoint"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// flightStream is a run with everything the checkpoint must carry: two
// processes, nested driver calls, host memory, the block layer, failed
// allocations, unknown and replaced frees, a peak early on and a leak.
func flightStream() *eventtest.Stream {
	s := eventtest.NewStream().Stack(1, "forward", 10).Stack(2, "leaky", 20)
	t := uint64(1000)
	next := func() uint64 { t += 100; return t }
	nested := func(e event.Event) {
		d := e
		d.Flags, d.API = event.FlagNested, event.APICuMemAlloc
		if e.Kind == event.KindFree {
			d.API = event.APICuMemFree
		}
		s.Ev(d)
		e.Time++
		s.Ev(e)
	}
	// The block layer: an early peak of 3 blocks, then one kept.
	block := func(k event.Kind, addr, size uint64) {
		api := event.APIPyTorchMalloc
		if k == event.KindFree {
			api = event.APIPyTorchFree
		}
		s.Ev(event.Event{Time: next(), Addr: addr, Size: size, Stack: 2, Kind: k, Layer: event.LayerBlock, API: api})
	}
	block(event.KindAlloc, 0x1a000, 512)
	block(event.KindAlloc, 0x1b000, 1024)
	block(event.KindAlloc, 0x1c000, 2048)
	block(event.KindFree, 0x1b000, 0)
	block(event.KindFree, 0x1c000, 0)
	// An early peak, then released.
	for i := range uint64(8) {
		nested(event.Event{Time: next(), Addr: 0x10000 + i*0x1000, Size: 1 << 20, Stack: 1, Kind: event.KindAlloc, API: event.APICudaMalloc})
	}
	for i := range uint64(8) {
		nested(event.Event{Time: next(), Addr: 0x10000 + i*0x1000, Kind: event.KindFree, API: event.APICudaFree})
	}
	for i := range uint64(40) {
		s.Alloc(next(), 0x40000+i*0x100, 4096+i, 2) // kept: the leak
		s.Alloc(next(), 0x90000, 512, 1)
		s.Free(next(), 0x90000)
		s.AllocOn(next(), 0xa0000+i*0x100, 256, 1, 200, 1)
		if i%3 == 0 {
			s.FreeOn(next(), 0xa0000+i*0x100, 200)
		}
		if i%7 == 0 {
			s.Fail(next(), 1<<40, 1, 2)
			s.Free(next(), 0xdead0000+i) // unknown
			s.Ev(event.Event{Time: next(), Addr: 0x500000 + i, Size: 64, Kind: event.KindHostAlloc, API: event.APICudaMallocHost})
		}
	}
	// The VMM: a handle released while still mapped, unmapped later (its
	// physical memory goes then); one mapped, unmapped and released; one
	// left mapped to the end.
	vmm := func(k event.Kind, api event.API, addr, size, handle uint64) {
		s.Ev(event.Event{Time: next(), Addr: addr, Size: size, Stream: handle, Kind: k, API: api})
	}
	const mib2 = 2 << 20
	vmm(event.KindReserve, event.APICuMemAddressReserve, 0x7e0000000000, 8*mib2, 0)
	for i := range uint64(3) {
		vmm(event.KindCreate, event.APICuMemCreate, 0xc0de00000001+i, mib2, 0)
		vmm(event.KindMap, event.APICuMemMap, 0x7e0000000000+i*mib2, mib2, 0xc0de00000001+i)
	}
	vmm(event.KindRelease, event.APICuMemRelease, 0xc0de00000001, 0, 0)
	s.Alloc(next(), 0x48000, 100, 1)
	vmm(event.KindUnmap, event.APICuMemUnmap, 0x7e0000000000, 2*mib2, 0) // two mappings
	vmm(event.KindRelease, event.APICuMemRelease, 0xc0de00000002, 0, 0)
	s.Free(next(), 0x48000)
	return s.End(next())
}

// TestCheckpointRestore cuts the stream at every event, as a flight
// recorder does when it drops the segments before: the checkpoint and the
// events after the cut must give the whole stream's totals, live
// allocations (by stack, per process and device) and peak.
func TestCheckpointRestore(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"default", Options{}},
		// A grid of 4 buckets ends coarser than the checkpoint's: its
		// timelines merge into it.
		{"few timeline points", Options{TimelinePoints: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkCheckpointRestore(t, tc.opts) })
	}
}

func checkCheckpointRestore(t *testing.T, opts Options) {
	recs := flightStream().Recs
	whole := mustAnalyze(t, opts, recs)
	require.NotZero(t, whole.Totals.LiveBytesAtEnd)
	for cut := range recs {
		if _, ok := recs[cut].(*event.Event); !ok {
			continue
		}
		window := cutAt(recs, cut)
		var c *event.Checkpoint
		for _, r := range window {
			if cp, ok := r.(*event.Checkpoint); ok {
				c = cp
			}
		}
		require.NotNil(t, c, "cut %d: the window's checkpoint", cut)
		got := mustAnalyze(t, opts, window)

		require.NotNil(t, got.Run.Flight, "cut %d", cut)
		assert.Equal(t, c.Events+got.Run.Events, whole.Run.Events, "cut %d: events", cut)
		for _, pair := range []struct {
			name       string
			got, whole Totals
		}{{"device", got.Totals, whole.Totals}, {"host", got.Host, whole.Host}} {
			g, w := pair.got, pair.whole
			assert.Equal(t, w.Allocations, g.Allocations, "cut %d %s: allocations", cut, pair.name)
			assert.Equal(t, w.Frees, g.Frees, "cut %d %s: frees", cut, pair.name)
			assert.Equal(t, w.AllocatedBytes, g.AllocatedBytes, "cut %d %s: allocated", cut, pair.name)
			assert.Equal(t, w.FreedBytes, g.FreedBytes, "cut %d %s: freed", cut, pair.name)
			assert.Equal(t, w.FailedAllocations, g.FailedAllocations, "cut %d %s: failed", cut, pair.name)
			assert.Equal(t, w.UnknownFrees, g.UnknownFrees, "cut %d %s: unknown frees", cut, pair.name)
			assert.Equal(t, w.PeakBytes, g.PeakBytes, "cut %d %s: peak", cut, pair.name)
			assert.Equal(t, w.PeakTime, g.PeakTime, "cut %d %s: peak time", cut, pair.name)
			assert.Equal(t, w.LiveBytesAtEnd, g.LiveBytesAtEnd, "cut %d %s: live", cut, pair.name)
			assert.Equal(t, w.LiveAllocationsAtEnd, g.LiveAllocationsAtEnd, "cut %d %s: live allocations", cut, pair.name)
		}
		assert.Equal(t, whole.Books, got.Books, "cut %d: books", cut)
		if whole.VMM != nil {
			require.NotNil(t, got.VMM, "cut %d: vmm", cut)
			assert.Equal(t, whole.VMM.PhysicalBytesAtEnd, got.VMM.PhysicalBytesAtEnd, "cut %d: physical", cut)
			assert.Equal(t, whole.VMM.MappedBytesAtEnd, got.VMM.MappedBytesAtEnd, "cut %d: mapped", cut)
			assert.Equal(t, whole.VMM.ReservedBytesAtEnd, got.VMM.ReservedBytesAtEnd, "cut %d: reserved", cut)
		}
		require.Len(t, got.Devices, len(whole.Devices), "cut %d: devices", cut)
		for i, wd := range whole.Devices {
			gd := got.Devices[i]
			assert.Equal(t, wd.Index, gd.Index)
			assert.Equal(t, wd.PeakBytes, gd.PeakBytes, "cut %d device %d: peak", cut, wd.Index)
			assert.Equal(t, wd.PeakTime, gd.PeakTime, "cut %d device %d: peak time", cut, wd.Index)
			assert.Equal(t, wd.LiveBytesAtEnd, gd.LiveBytesAtEnd, "cut %d device %d: live", cut, wd.Index)
		}
		require.Len(t, got.Processes, len(whole.Processes), "cut %d", cut)
		for i := range whole.Processes {
			wp, gp := whole.Processes[i], got.Processes[i]
			assert.Equal(t, wp.PID, gp.PID)
			wt, gt := wp.Totals, gp.Totals
			assert.Equal(t, wt.Allocations, gt.Allocations, "cut %d pid %d: allocations", cut, wp.PID)
			assert.Equal(t, wt.Frees, gt.Frees, "cut %d pid %d: frees", cut, wp.PID)
			assert.Equal(t, wt.PeakBytes, gt.PeakBytes, "cut %d pid %d: peak", cut, wp.PID)
			assert.Equal(t, wp.PeakTime, gp.PeakTime, "cut %d pid %d: peak time", cut, wp.PID)
			assert.Equal(t, wt.LiveBytesAtEnd, gt.LiveBytesAtEnd, "cut %d pid %d: live", cut, wp.PID)
			assert.Equal(t, wp.LiveAtEnd, gp.LiveAtEnd, "cut %d pid %d: live stacks", cut, wp.PID)
			assert.Equal(t, wp.Devices, gp.Devices, "cut %d pid %d: devices", cut, wp.PID)
			assert.Equal(t, wp.PeakStacks, gp.PeakStacks, "cut %d pid %d: peak stacks", cut, wp.PID)
			assert.Equal(t, wp.PeakEvent, gp.PeakEvent, "cut %d pid %d: peak event", cut, wp.PID)
		}
		for i, wd := range whole.Devices {
			assert.Equal(t, wd.PeakStacks, got.Devices[i].PeakStacks, "cut %d device %d: peak stacks", cut, wd.Index)
		}
		assert.Equal(t, peakClasses(whole), peakClasses(got), "cut %d: the profile's peak samples", cut)
		assert.Equal(t, findingsOf(whole, KindPeak), findingsOf(got, KindPeak), "cut %d: peak findings", cut)
		assert.Equal(t, timelinesOf(whole), timelinesOf(got), "cut %d: timelines", cut)
	}
}

// timelinesOf returns r's timelines by process and scope.
func timelinesOf(r *Result) []Timeline {
	out := slices.Clone(r.Timelines)
	for i := range out {
		out[i].ProcessStart = 0 // pid 200 has no Process record: its start is implied by the checkpoint
	}
	return out
}

// peakClasses are the classes live at their process's peak, as the pprof
// profile's peak samples show them.
func peakClasses(r *Result) map[Class]Usage {
	m := make(map[Class]Usage)
	for _, c := range r.Classes {
		if c.Peak.Count == 0 {
			continue
		}
		k := c
		k.Alloc, k.Live, k.Peak = Usage{}, Usage{}, Usage{}
		k.ProcessStart = 0 // pid 200 has no Process record: its start is implied by the checkpoint
		m[k] = c.Peak
	}
	return m
}

// findingsOf returns r's findings of one kind.
func findingsOf(r *Result, kind string) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Kind == kind {
			f.ProcessStart = 0 // pid 200 has no Process record: its start is implied by the checkpoint
			out = append(out, f)
		}
	}
	return out
}

// TestCheckpointRestoreExec cuts a stream in which a process execs after
// allocating (its memory dies with the old image, never freed): the
// all-process figures after a restore match the whole stream's. The
// restored stream shows the images as one process.
func TestCheckpointRestoreExec(t *testing.T) {
	s := eventtest.NewStream().Stack(1, "forward", 10)
	s.Recs = append(s.Recs, &event.Process{PID: 300, Command: []string{"a"}, Time: 50})
	s.AllocOn(100, 0x1000, 1<<20, 1, 300, 0)
	s.AllocOn(110, 0x2000, 1<<10, 1, 300, 0)
	s.FreeOn(120, 0x2000, 300)
	s.Alloc(130, 0x9000, 4096, 1)
	s.Recs = append(s.Recs, &event.Process{PID: 300, Command: []string{"b"}, Time: 140}) // exec
	s.AllocOn(150, 0x5000, 1<<19, 1, 300, 0)
	s.AllocOn(160, 0x3000, 1<<18, 1, 300, 0)
	s.FreeOn(170, 0x3000, 300)
	s.Free(180, 0x9000)
	recs := s.End(200).Recs
	whole := mustAnalyze(t, Options{}, recs)
	for cut := range recs {
		if _, ok := recs[cut].(*event.Event); !ok {
			continue
		}
		tr := checkpoint.NewTracker()
		var desc, after []event.Record
		for i, r := range recs {
			switch x := r.(type) {
			case *event.Event:
				if i < cut {
					tr.Observe(x)
				} else {
					after = append(after, r)
				}
			case *event.Header:
			default:
				if i < cut {
					if p, ok := r.(*event.Process); ok {
						tr.Process(p)
					}
					desc = append(desc, r)
				} else {
					after = append(after, r)
				}
			}
		}
		c, live := tr.Checkpoint(2)
		window := append([]event.Record{recs[0]}, desc...)
		window = append(window, c)
		for i := range live {
			window = append(window, &live[i])
		}
		got := mustAnalyze(t, Options{}, append(window, after...))
		w, g := whole.Totals, got.Totals
		assert.Equal(t, w.Allocations, g.Allocations, "cut %d: allocations", cut)
		assert.Equal(t, w.Frees, g.Frees, "cut %d: frees", cut)
		assert.Equal(t, w.PeakBytes, g.PeakBytes, "cut %d: peak", cut)
		assert.Equal(t, w.LiveBytesAtEnd, g.LiveBytesAtEnd, "cut %d: live", cut)
		assert.Equal(t, w.LiveAllocationsAtEnd, g.LiveAllocationsAtEnd, "cut %d: live allocations", cut)
		assert.Equal(t, w.UnknownFrees, g.UnknownFrees, "cut %d: unknown frees", cut)
		require.Len(t, got.Devices, len(whole.Devices), "cut %d", cut)
		for i := range whole.Devices {
			assert.Equal(t, whole.Devices[i].PeakBytes, got.Devices[i].PeakBytes, "cut %d: device peak", cut)
			assert.Equal(t, whole.Devices[i].LiveBytesAtEnd, got.Devices[i].LiveBytesAtEnd, "cut %d: device live", cut)
			assert.Equal(t, whole.Devices[i].PeakStacks, got.Devices[i].PeakStacks, "cut %d: device peak stacks", cut)
		}
		assert.Equal(t, whole.Books.Runtime.LiveBytesAtEnd, got.Books.Runtime.LiveBytesAtEnd, "cut %d: book live", cut)
		assert.Equal(t, whole.Books.Runtime.Allocations, got.Books.Runtime.Allocations, "cut %d: book allocations", cut)
	}
}

// checkpointWindow is what a flight recorder cut at record cut (an event)
// holds: the header, the descriptive records before the cut, a tracker's
// checkpoint of the events before it with the allocations it restores,
// then the records from the cut on.
func checkpointWindow(recs []event.Record, cut int) []event.Record {
	tr := checkpoint.NewTracker()
	tr.SetStart(recs[0].(*event.Header).Start)
	var desc, after []event.Record
	for i, r := range recs[1:] {
		switch x := r.(type) {
		case *event.Event:
			if i+1 < cut {
				tr.Observe(x)
			} else {
				after = append(after, r)
			}
		default:
			if i+1 >= cut {
				after = append(after, r)
				continue
			}
			if p, ok := r.(*event.Process); ok {
				tr.Process(p)
			}
			desc = append(desc, r)
		}
	}
	c, live := tr.Checkpoint(2)
	window := append([]event.Record{recs[0]}, desc...)
	window = append(window, c)
	for i := range live {
		window = append(window, &live[i])
	}
	return append(window, after...)
}

// TestCheckpointRestoreAgrees cuts streams on which the tracker once had
// rules of its own, at every event: a report from the checkpoint now
// agrees with the whole stream's, since both follow the ledger.
func TestCheckpointRestoreAgrees(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(s *eventtest.Stream)
	}{{
		// Events of pid 400 come before its Process record (an imported
		// stream; an attach that read the process late): the record
		// describes the process the events implied, it does not end it.
		// The tracker used to forget the 1 MiB then: its free after the
		// cut was unknown, and the 2 MiB left out of the peak at 160.
		name: "process record after its events",
		build: func(s *eventtest.Stream) {
			s.AllocOn(100, 0x1000, 1<<20, 1, 400, 0)
			s.AllocOn(110, 0x2000, 1<<10, 1, 400, 0)
			s.Add(&event.Process{PID: 400, Command: []string{"late"}, Time: 90})
			s.AllocOn(150, 0x3000, 1<<21, 1, 400, 0)
			s.FreeOn(160, 0x1000, 400)
			s.FreeOn(170, 0x3000, 400)
		},
	}, {
		// A block-layer event flagged nested: the analysis counts every
		// block call (nesting is the CUDA API's notion); the tracker used
		// to keep it apart, so its free was unknown and the block left
		// live.
		name: "nested block",
		build: func(s *eventtest.Stream) {
			s.Ev(event.Event{Time: 100, Addr: 0x1a000, Size: 512, Stack: 1, Kind: event.KindAlloc, Layer: event.LayerBlock,
				API: event.APIPyTorchMalloc, Flags: event.FlagNested})
			s.Ev(event.Event{Time: 110, Addr: 0x1b000, Size: 1024, Stack: 1, Kind: event.KindAlloc, Layer: event.LayerBlock,
				API: event.APIPyTorchMalloc})
			s.Ev(event.Event{Time: 120, Addr: 0x1a000, Stack: 1, Kind: event.KindFree, Layer: event.LayerBlock,
				API: event.APIPyTorchFree})
			s.Ev(event.Event{Time: 130, Addr: 0x1c000, Size: 256, Stack: 1, Kind: event.KindAlloc, Layer: event.LayerBlock,
				API: event.APIPyTorchMalloc})
		},
	}, {
		// Handle 0xc0de created, mapped at one range, created again (its
		// release missed), then that range unmapped: the mapping count
		// of the handle's new life went below zero. The ledger frees its
		// physical memory at the release (nothing maps it); the tracker
		// used to keep it and its release live until a mapping count of
		// zero that never came, restoring both at every checkpoint (a
		// reader freed it at once: the figures agreed, the tracker's
		// memory grew).
		name: "release after a stale unmap",
		build: func(s *eventtest.Stream) {
			vmm := func(at uint64, k event.Kind, api event.API, addr, size, handle uint64) {
				s.Ev(event.Event{Time: at, Addr: addr, Size: size, Stream: handle, Kind: k, API: api, Stack: 1})
			}
			vmm(100, event.KindCreate, event.APICuMemCreate, 0xc0de, 2<<20, 0)
			vmm(110, event.KindMap, event.APICuMemMap, 0x7e0000000000, 2<<20, 0xc0de)
			vmm(120, event.KindCreate, event.APICuMemCreate, 0xc0de, 4<<20, 0)
			vmm(130, event.KindUnmap, event.APICuMemUnmap, 0x7e0000000000, 2<<20, 0)
			vmm(140, event.KindRelease, event.APICuMemRelease, 0xc0de, 0, 0)
			s.Alloc(150, 0x1000, 1<<20, 1)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := eventtest.NewStream().Stack(1, "forward", 10)
			tc.build(s)
			recs := s.End(200).Recs
			whole := mustAnalyze(t, Options{}, recs)
			for cut := range recs {
				if _, ok := recs[cut].(*event.Event); !ok {
					continue
				}
				got := mustAnalyze(t, Options{}, checkpointWindow(recs, cut))
				for _, pair := range []struct {
					name       string
					got, whole Totals
				}{{"device", got.Totals, whole.Totals}, {"block", blockTotals(got), blockTotals(whole)}} {
					g, w := pair.got, pair.whole
					assert.Equal(t, w.Allocations, g.Allocations, "cut %d %s: allocations", cut, pair.name)
					assert.Equal(t, w.Frees, g.Frees, "cut %d %s: frees", cut, pair.name)
					assert.Equal(t, w.UnknownFrees, g.UnknownFrees, "cut %d %s: unknown frees", cut, pair.name)
					assert.Equal(t, w.PeakBytes, g.PeakBytes, "cut %d %s: peak", cut, pair.name)
					assert.Equal(t, w.PeakTime, g.PeakTime, "cut %d %s: peak time", cut, pair.name)
					assert.Equal(t, w.LiveBytesAtEnd, g.LiveBytesAtEnd, "cut %d %s: live", cut, pair.name)
					assert.Equal(t, w.LiveAllocationsAtEnd, g.LiveAllocationsAtEnd, "cut %d %s: live allocations", cut, pair.name)
				}
				assert.Equal(t, whole.Books, got.Books, "cut %d: books", cut)
				if whole.VMM != nil && got.VMM != nil { // the VMM's call counts are not checkpointed
					assert.Equal(t, whole.VMM.PhysicalBytesAtEnd, got.VMM.PhysicalBytesAtEnd, "cut %d: physical", cut)
				}
			}
		})
	}
}

// blockTotals returns r's block-layer totals; zero when it has none.
func blockTotals(r *Result) Totals {
	if r.Blocks == nil {
		return Totals{}
	}
	return *r.Blocks
}

// TestCheckpointTimelineLevel: a checkpoint's timelines on a coarser grid
// (TimelineLevel 2: buckets of 1024<<2 = 4096 ns) coarsen the analysis's
// grid to theirs, and the events after the cut fall in its buckets. The
// restored bucket 1 spans [4096, 8192) ns from the start: its low of 8
// bytes at 5000 ns and the levels after the cut (the checkpoint restores
// nothing live: 1 MiB at 6000 ns, 2 MiB at 7000, 1 MiB at 7500) make one
// bucket, a low (8 at 5000) and a high (2 MiB at 7000); buckets of 1024
// ns would keep four points.
func TestCheckpointTimelineLevel(t *testing.T) {
	const pid = 7
	recs := []event.Record{
		&event.Header{Version: 1, PID: pid, Start: 0},
		&event.Checkpoint{Time: 5000, Events: 1, FirstTime: 1, TimelineLevel: 2,
			Timelines: []event.CheckpointTimeline{{PID: pid, Layer: event.LayerSegment, Buckets: []event.TimelineBucket{
				{Index: 1, MinTime: 5000, MinBytes: 8, MaxTime: 5000, MaxBytes: 8}}}}},
	}
	ev := func(at, addr, size uint64, k event.Kind, api event.API) {
		recs = append(recs, &event.Event{Time: at, PID: pid, Addr: addr, Size: size, Kind: k, API: api, Stack: 1})
	}
	ev(6000, 0xa000, MiB, event.KindAlloc, event.APICudaMalloc)
	ev(7000, 0xb000, MiB, event.KindAlloc, event.APICudaMalloc)
	ev(7500, 0xb000, 0, event.KindFree, event.APICudaFree)
	r := mustAnalyze(t, Options{}, recs)
	require.Len(t, r.Timelines, 1)
	assert.Equal(t, []Point{{5000, 8}, {7000, 2 * MiB}}, r.Timelines[0].Points)
}
