package status

import (
	"sync/atomic"

	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// Live follows the device memory live in the traced processes as the
// records go to the trace, for the status line only: the outputs come from
// the analysis of the trace, never from here. The live memory model is the
// analysis's own (analysis/ledger): the same rules (segment layer, nested
// calls not counted again, physical memory live until released and
// unmapped, an exited process's memory gone from the all-process figures)
// at O(1) per record. It also keeps NVML's latest per-device figures.
//
// Observe is called by one goroutine at a time (a recorder's mutex
// serializes the session's reader and the NVML sampler); Bytes and NVMLUsed
// are safe for concurrent use.
type Live struct {
	ledger   *ledger.Ledger
	nvml     map[int32]uint64
	live     atomic.Uint64
	peak     atomic.Uint64
	nvmlUsed atomic.Uint64
	nvmlSeen atomic.Bool
}

// NewLive returns a Live that has seen no record.
func NewLive() *Live {
	return &Live{ledger: ledger.New(), nvml: make(map[int32]uint64)}
}

// Observe applies one record.
func (l *Live) Observe(rec event.Record) {
	switch r := rec.(type) {
	case *event.Event, *event.Process:
		l.ledger.Apply(rec)
		lv := l.ledger.ScopeLevel(ledger.DeviceScope)
		l.live.Store(lv.Bytes)
		l.peak.Store(lv.Peak)
	case *event.Sample:
		l.nvml[r.Device] = r.UsedBytes
		var sum uint64
		for _, used := range l.nvml {
			sum += used
		}
		l.nvmlUsed.Store(sum)
		l.nvmlSeen.Store(true)
	}
}

// Bytes returns the device bytes live now and the most live at once so
// far, over every traced process.
func (l *Live) Bytes() (live, peak uint64) { return l.live.Load(), l.peak.Load() }

// NVMLUsed returns the device memory NVML last reported used, summed over
// devices, and whether any sample came yet.
func (l *Live) NVMLUsed() (used uint64, seen bool) { return l.nvmlUsed.Load(), l.nvmlSeen.Load() }
