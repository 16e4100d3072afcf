package status

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

const (
	stGiB = 1 << 30
	stMiB = 1 << 20
)

func TestFormatStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Figures
		want string
	}{
		{
			name: "nothing yet",
			want: "0.0s  0 events (0/s)  live 0 B  peak 0 B  lost 0  0 processes",
		},
		{
			name: "one process",
			f:    Figures{Elapsed: 12500 * time.Millisecond, Events: 8160, Rate: 650, Live: 1536 * stMiB, Peak: 2 * stGiB, Procs: 1},
			want: "12.5s  8160 events (650/s)  live 1.50 GiB  peak 2.00 GiB  lost 0  1 process",
		},
		{
			name: "nvml sampled",
			f: Figures{Elapsed: 59960 * time.Millisecond, Events: 10, Rate: 999.4, Live: 512, Peak: 4096,
				Procs: 1, NVMLUsed: 3*stGiB + 100*stMiB, NVMLSeen: true},
			want: "59.9s  10 events (999/s)  live 512 B  peak 4.00 KiB  lost 0  1 process  NVML used 3.10 GiB",
		},
		{
			name: "nvml sampled, nothing used",
			f:    Figures{Elapsed: time.Second, Procs: 1, NVMLSeen: true},
			want: "1.0s  0 events (0/s)  live 0 B  peak 0 B  lost 0  1 process  NVML used 0 B",
		},
		{
			name: "minutes",
			f:    Figures{Elapsed: 2*time.Minute + 5900*time.Millisecond, Events: 1000, Rate: 999.6, Procs: 2},
			want: "2m05s  1000 events (1.0k/s)  live 0 B  peak 0 B  lost 0  2 processes",
		},
		{
			name: "hours, losing events",
			f: Figures{Elapsed: time.Hour + 2*time.Minute + 5*time.Second, Events: 123456789, Rate: 12345.6,
				Live: 80 * stGiB, Peak: 81 * stGiB, Lost: 17, Procs: 3},
			want: "1h02m05s  123456789 events (12.3k/s)  live 80.00 GiB  peak 81.00 GiB  lost 17  3 processes",
		},
		{
			name: "millions a second",
			f:    Figures{Elapsed: 25 * time.Hour, Events: 1 << 40, Rate: 1.5e6, Procs: 1},
			want: "25h00m00s  1099511627776 events (1.5M/s)  live 0 B  peak 0 B  lost 0  1 process",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Format(tc.f))
		})
	}
}

// TestLiveBytes feeds records to the status line's tracker and checks live
// and peak after each, by the analysis's rules for device totals.
func TestLiveBytes(t *testing.T) {
	ev := func(kind event.Kind, pid uint32, addr, size uint64) *event.Event {
		return &event.Event{Kind: kind, PID: pid, Addr: addr, Size: size, Layer: event.LayerSegment}
	}
	nested := ev(event.KindAlloc, 1, 0x9000, 7*stMiB)
	nested.Flags = event.FlagNested
	failed := ev(event.KindAlloc, 1, 0, 5*stMiB)
	failed.Ret = 2
	block := ev(event.KindAlloc, 1, 0xa000, 9*stMiB)
	block.Layer = event.LayerBlock
	unknownLayer := ev(event.KindAlloc, 1, 0xb000, 3*stMiB)
	unknownLayer.Layer = event.LayerUnknown

	l := NewLive()
	for _, step := range []struct {
		name       string
		rec        event.Record
		live, peak uint64
	}{
		{"alloc", ev(event.KindAlloc, 1, 0x1000, 10*stMiB), 10 * stMiB, 10 * stMiB},
		{"nested driver call: counted by its outer call", nested, 10 * stMiB, 10 * stMiB},
		{"failed alloc: never live", failed, 10 * stMiB, 10 * stMiB},
		{"block layer: inside segments already counted", block, 10 * stMiB, 10 * stMiB},
		{"same address, other process", ev(event.KindAlloc, 2, 0x1000, 20*stMiB), 30 * stMiB, 30 * stMiB},
		{"unset layer is a segment", unknownLayer, 33 * stMiB, 33 * stMiB},
		{"physical handle equal to a pointer", ev(event.KindCreate, 1, 0x1000, 2*stMiB), 35 * stMiB, 35 * stMiB},
		{"free", ev(event.KindFree, 2, 0x1000, 0), 15 * stMiB, 35 * stMiB},
		{"free of memory from before tracing", ev(event.KindFree, 1, 0x5000, 0), 15 * stMiB, 35 * stMiB},
		{"missed free: the old allocation goes", ev(event.KindAlloc, 1, 0x1000, 4*stMiB), 9 * stMiB, 35 * stMiB},
		{"release", ev(event.KindRelease, 1, 0x1000, 0), 7 * stMiB, 35 * stMiB},
		{"pinned host memory is not device memory", ev(event.KindHostAlloc, 1, 0x7000, 64*stMiB), 7 * stMiB, 35 * stMiB},
		{"free the rest", ev(event.KindFree, 1, 0x1000, 0), 3 * stMiB, 35 * stMiB},
		{"double free", ev(event.KindFree, 1, 0x1000, 0), 3 * stMiB, 35 * stMiB},
	} {
		l.Observe(step.rec)
		assert.Equal(t, step.live, l.live.Load(), "live after %s", step.name)
		assert.Equal(t, step.peak, l.peak.Load(), "peak after %s", step.name)
	}

	assert.False(t, l.nvmlSeen.Load(), "no NVML sample yet")
	l.Observe(&event.Sample{Device: 0, UsedBytes: 3 * stGiB})
	l.Observe(&event.Sample{Device: 1, UsedBytes: 1 * stGiB})
	l.Observe(&event.Sample{Device: 0, UsedBytes: 2 * stGiB})
	assert.True(t, l.nvmlSeen.Load())
	assert.Equal(t, uint64(3*stGiB), l.nvmlUsed.Load(), "latest sample of each device, summed")
}

// TestLiveBytesAgreesWithAnalysis replays a VMM stream, as PyTorch's
// expandable segments make one, record by record: after each, the status
// line's live and peak equal the analysis's device totals for the stream
// so far. The physical memory released before its unmap stays live until
// the unmap, in both. The expected levels are the arithmetic of the calls.
func TestLiveBytesAgreesWithAnalysis(t *testing.T) {
	const h1, h2, va = 0xa1, 0xa2, 0x7f0000000000
	call := func(kind event.Kind, api event.API, addr, size uint64) *event.Event {
		return &event.Event{Kind: kind, API: api, PID: 10, Addr: addr, Size: size, Layer: event.LayerSegment}
	}
	mapOf := func(addr, size, handle uint64) *event.Event {
		e := call(event.KindMap, event.APICuMemMap, addr, size)
		e.Stream = handle
		return e
	}
	recs := []struct {
		name       string
		rec        event.Record
		live, peak uint64
	}{
		{"process", &event.Process{PID: 10, Command: []string{"train"}}, 0, 0},
		{"reserve: address space only", call(event.KindReserve, event.APICuMemAddressReserve, va, 64*stMiB), 0, 0},
		{"create h1", call(event.KindCreate, event.APICuMemCreate, h1, 20*stMiB), 20 * stMiB, 20 * stMiB},
		{"map h1", mapOf(va, 20*stMiB, h1), 20 * stMiB, 20 * stMiB},
		{"create h2", call(event.KindCreate, event.APICuMemCreate, h2, 2*stMiB), 22 * stMiB, 22 * stMiB},
		{"map h2", mapOf(va+20*stMiB, 2*stMiB, h2), 22 * stMiB, 22 * stMiB},
		{"cudaMalloc", call(event.KindAlloc, event.APICudaMalloc, 0x1000, 8*stMiB), 30 * stMiB, 30 * stMiB},
		{"release h1 while mapped: still live", call(event.KindRelease, event.APICuMemRelease, h1, 0), 30 * stMiB, 30 * stMiB},
		{"release h2 while mapped: still live", call(event.KindRelease, event.APICuMemRelease, h2, 0), 30 * stMiB, 30 * stMiB},
		{"unmap h1's range: h1 freed", call(event.KindUnmap, event.APICuMemUnmap, va, 20*stMiB), 10 * stMiB, 30 * stMiB},
		{"unmap h2's range: h2 freed", call(event.KindUnmap, event.APICuMemUnmap, va+20*stMiB, 2*stMiB), 8 * stMiB, 30 * stMiB},
	}
	l := NewLive()
	for i, step := range recs {
		if e, ok := step.rec.(*event.Event); ok {
			e.Time = uint64(i+1) * 1000
		}
		l.Observe(step.rec)
		a := analysis.New(analysis.Options{})
		require.NoError(t, a.Add(&event.Header{Version: 1, PID: 10, Start: 1}))
		for _, r := range recs[:i+1] {
			require.NoError(t, a.Add(r.rec))
		}
		res := a.Finish()
		assert.Equal(t, step.live, l.live.Load(), "status live after %s", step.name)
		assert.Equal(t, step.peak, l.peak.Load(), "status peak after %s", step.name)
		assert.Equal(t, step.live, res.Totals.LiveBytesAtEnd, "analysis live after %s", step.name)
		assert.Equal(t, step.peak, res.Totals.PeakBytes, "analysis peak after %s", step.name)
	}
}
