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
