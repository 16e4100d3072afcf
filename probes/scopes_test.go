//go:build linux

package probes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

// TestScopeTargets finds NativeCachingAllocator::emptyCache in Debian's
// libc10_cuda.so (make torch), which no symbol table names, through its
// class's vtable: slot 13, at 0x4ef60, 0x18c bytes by its FDE, one return
// (0x4f06a); file offsets 0x1000 below; and in testdata's fake allocator
// by its dynamic symbol.
func TestScopeTargets(t *testing.T) {
	for _, tc := range []struct {
		name, path   string
		entry        uint64
		returns      []uint64 // file offsets; nil: any, at least one
		requireFetch bool
	}{
		{name: "debian", path: filepath.Join(probetest.Root(), "testdata", "torch", "build", "lib", "libc10_cuda.so.2.6"),
			entry: 0x4df60, returns: []uint64{0x4e06a}, requireFetch: true},
		{name: "fake", path: filepath.Join(probetest.Root(), "testdata", "build", "lib", "libc10_cuda.so")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.path); err != nil {
				if tc.requireFetch {
					t.Skipf("PyTorch's libraries are not fetched (make torch): %v", err)
				}
				require.NoError(t, err, "make testdata")
			}
			pf, err := scanFile(candidate{Path: tc.path, OpenPath: tc.path}, nil, true, nil)
			require.NoError(t, err)
			require.NotNil(t, pf)
			assert.Empty(t, pf.Skipped)
			var begins, ends []target
			for _, tg := range pf.Targets {
				if tg.Spec.API != event.APIC10EmptyCache {
					continue
				}
				assert.Equal(t, progUSDT, tg.Spec.Prog)
				require.NotNil(t, tg.USDT)
				assert.Zero(t, tg.USDT.SemaphoreOffset, "no semaphore")
				switch tg.Spec.Kind {
				case event.KindAlloc:
					begins = append(begins, tg)
					assert.Len(t, tg.USDT.Args, 4)
				case event.KindFree:
					ends = append(ends, tg)
					assert.Len(t, tg.USDT.Args, 1)
				}
			}
			require.Len(t, begins, 1, "one entry")
			assert.Equal(t, 1, countOf(pf.cudaSymbols(), event.APIC10EmptyCache.String()),
				"the library record names it once")
			require.NotEmpty(t, ends, "its returns")
			if tc.entry != 0 {
				assert.Equal(t, tc.entry, begins[0].Offset)
			}
			if tc.returns != nil {
				var got []uint64
				for _, e := range ends {
					got = append(got, e.Offset)
				}
				assert.Equal(t, tc.returns, got)
			}

			// Without the block layer (--pool off) it is not probed.
			pf, err = scanFile(candidate{Path: tc.path, OpenPath: tc.path}, nil, false, nil)
			require.NoError(t, err)
			if pf != nil {
				for _, tg := range pf.Targets {
					assert.NotEqual(t, event.APIC10EmptyCache, tg.Spec.API)
				}
			}
		})
	}
}

// TestScopeEvents runs PyTorch's real allocator (torchdrv b_churn: 40
// steps, torch.cuda.empty_cache() after each, from release_every_step)
// and the fake one (pool_empty_cache: C10_EMPTY_CACHE in each step) under
// a session: every emptyCache call is a begin and an end on its thread at
// the same rsp; the begin's stack is the function, then its direct caller
// (which a walk from a function's entry skips: the recorded return
// address puts it back); and the segment frees of the release fall
// between them.
func TestScopeEvents(t *testing.T) {
	torchdrv := filepath.Join(probetest.Root(), "testdata", "torch", "build", "bin", "torchdrv")
	for _, tc := range []struct {
		name   string
		argv   func(t *testing.T) []string
		calls  int    // emptyCache calls made
		caller string // the begin's frame 1
	}{
		{name: "libc10_cuda", calls: 40, caller: "(anonymous namespace)::release_every_step", argv: func(t *testing.T) []string {
			if _, err := os.Stat(torchdrv); err != nil {
				t.Skipf("torchdrv is not built (make torch): %v", err)
			}
			return []string{torchdrv, "b_churn"}
		}},
		// The fake's emptyCache is called by its C API's c10_empty_cache.
		{name: "fake", calls: 21, caller: "c10_empty_cache", argv: func(t *testing.T) []string {
			return []string{probetest.Bin(t, "pool_empty_cache")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probetest.RequirePrivilege(t)
			sink, code := runProgram(t, tc.argv(t), "VRAMPROF_TRUTH="+filepath.Join(t.TempDir(), "truth.json"))
			require.Zero(t, code)
			assert.Zero(t, sink.lost, "lost events")
			type open struct {
				sp    uint64
				frees int
			}
			inScope := make(map[uint32]*open)
			var begins, ends, freesInside int
			for _, e := range sink.events {
				switch {
				case e.API == event.APIC10EmptyCache && e.Kind == event.KindScopeBegin:
					begins++
					assert.Equal(t, event.LayerBlock, e.Layer)
					require.Nil(t, inScope[e.TID], "scopes do not nest here")
					inScope[e.TID] = &open{sp: e.Addr}
					st := sink.stacks[e.Stack]
					require.NotNil(t, st, "a begin has its stack")
					require.GreaterOrEqual(t, len(st.Frames), 3)
					assert.Equal(t, tc.caller, st.Frames[1].Function, "the direct caller of emptyCache")
				case e.API == event.APIC10EmptyCache && e.Kind == event.KindScopeEnd:
					ends++
					o := inScope[e.TID]
					require.NotNil(t, o, "an end after its begin")
					assert.Equal(t, o.sp, e.Addr, "the end's rsp is the begin's")
					freesInside += o.frees
					delete(inScope, e.TID)
				case e.API == event.APICudaFree && e.Flags&event.FlagNested == 0:
					if o := inScope[e.TID]; o != nil {
						o.frees++
					}
				}
			}
			assert.Equal(t, tc.calls, begins, "a begin per emptyCache call")
			assert.Equal(t, tc.calls, ends, "an end per emptyCache call")
			assert.Empty(t, inScope, "every scope ended")
			assert.Positive(t, freesInside, "the release's cudaFree calls are inside its scopes")
			t.Logf("%d emptyCache scopes, %d cudaFree inside", begins, freesInside)
		})
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
