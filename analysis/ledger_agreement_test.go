package analysis

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// TestLedgerApplyAgreesWithAnalyzer feeds random streams (every layer and
// memory space, nested calls, failures, missed frees, VMM calls in any
// order, PID reuse) to an Analyzer and to a bare Ledger through Apply, as
// the live status line does: at the end of every prefix the two agree on
// what is live and the peak, device memory, pinned host memory and
// blocks alike. The Analyzer drives the ledger call by call; Apply is the
// ledger's own dispatch: this catches the two dispatches drifting apart.
func TestLedgerApplyAgreesWithAnalyzer(t *testing.T) {
	kinds := []event.Kind{event.KindAlloc, event.KindFree, event.KindHostAlloc, event.KindHostFree,
		event.KindCreate, event.KindRelease, event.KindMap, event.KindUnmap, event.KindReserve, event.KindUnreserve}
	var nonzero [3]int // runs with device, host and block memory live at the cut
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		var recs []event.Record
		for i := range 400 {
			if r.IntN(40) == 0 {
				recs = append(recs, &event.Process{PID: uint32(1 + r.IntN(3)), Time: uint64(i + 1)})
				continue
			}
			e := &event.Event{Time: uint64(i + 1), PID: uint32(1 + r.IntN(3)), Kind: kinds[r.IntN(len(kinds))],
				Layer: event.LayerSegment, Device: int32(r.IntN(2)),
				Addr: uint64(r.IntN(8)) << 21, Size: uint64(1+r.IntN(4)) << 21, Stream: uint64(r.IntN(8)) << 21}
			switch r.IntN(10) {
			case 0:
				e.Ret = 2
			case 1:
				e.Flags = event.FlagNested
			case 2, 3:
				if e.Kind == event.KindAlloc || e.Kind == event.KindFree {
					e.Layer = event.LayerBlock
				}
			case 4:
				e.Layer = event.LayerUnknown
			}
			recs = append(recs, e)
		}
		for _, cut := range []int{100, 250, len(recs)} {
			a := New(Options{})
			l := ledger.New()
			require.NoError(t, a.Add(&event.Header{Version: 1, Start: 1}))
			for _, rec := range recs[:cut] {
				require.NoError(t, a.Add(rec))
				l.Apply(rec)
			}
			res := a.Finish()
			dev := l.ScopeLevel(ledger.DeviceScope)
			host := l.ScopeLevel(ledger.Scope{Layer: event.LayerSegment, Host: true})
			blocks := l.ScopeLevel(ledger.Scope{Layer: event.LayerBlock})
			require.Equal(t, res.Totals.LiveBytesAtEnd, dev.Bytes, "seed %d cut %d: device live", seed, cut)
			require.Equal(t, res.Totals.LiveAllocationsAtEnd, dev.Count, "seed %d cut %d: device count", seed, cut)
			require.Equal(t, res.Totals.PeakBytes, dev.Peak, "seed %d cut %d: device peak", seed, cut)
			require.Equal(t, res.Host.LiveBytesAtEnd, host.Bytes, "seed %d cut %d: host live", seed, cut)
			require.Equal(t, res.Host.PeakBytes, host.Peak, "seed %d cut %d: host peak", seed, cut)
			require.NotNil(t, res.Blocks)
			require.Equal(t, res.Blocks.LiveBytesAtEnd, blocks.Bytes, "seed %d cut %d: block live", seed, cut)
			require.Equal(t, res.Blocks.PeakBytes, blocks.Peak, "seed %d cut %d: block peak", seed, cut)
			for i, v := range []uint64{dev.Bytes, host.Bytes, blocks.Bytes} {
				if v > 0 {
					nonzero[i]++
				}
			}
		}
	}
	for i, n := range nonzero {
		require.Positive(t, n, "the streams leave memory live (figure %d), or the test shows nothing", i)
	}
}
