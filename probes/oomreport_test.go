//go:build linux

package probes

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

// TestOOMReportTargets finds c10::reportOutOfMemoryToProfiler in Debian's
// libc10.so (make torch), at the file offset its dynamic symbol gives,
// and not in libc10_cuda.so, which only imports it.
func TestOOMReportTargets(t *testing.T) {
	lib := filepath.Join(probetest.Root(), "testdata", "torch", "build", "lib")
	c10 := filepath.Join(lib, "libc10.so.2.6")
	if _, err := os.Stat(c10); err != nil {
		t.Skipf("PyTorch's libraries are not fetched (make torch): %v", err)
	}
	sym := oomReportProbes[0].Symbol
	// The offset, from debug/elf by way of the symbol's section.
	want := func(path string) (off uint64, defined, imported bool) {
		f, err := elf.Open(path)
		require.NoError(t, err)
		defer f.Close()
		syms, err := f.DynamicSymbols()
		require.NoError(t, err)
		for _, s := range syms {
			if s.Name != sym {
				continue
			}
			if s.Section == elf.SHN_UNDEF {
				return 0, false, true
			}
			sec := f.Sections[s.Section]
			return s.Value - sec.Addr + sec.Offset, true, false
		}
		return 0, false, false
	}

	off, defined, _ := want(c10)
	require.True(t, defined, "libc10.so defines %s", sym)
	pf, err := scanFile(candidate{Path: c10, OpenPath: c10}, nil, true, nil)
	require.NoError(t, err)
	require.NotNil(t, pf, "libc10.so holds a probe")
	require.Len(t, pf.Targets, 1)
	tg := pf.Targets[0]
	assert.Equal(t, off, tg.Offset, "file offset of the function's entry")
	assert.Equal(t, event.APIC10ReportOOM, tg.Spec.API)
	assert.Equal(t, event.KindAlloc, tg.Spec.Kind, "usdt_block reads all four arguments of an alloc")
	assert.Equal(t, progUSDT, tg.Spec.Prog)
	require.NotNil(t, tg.USDT)
	assert.Zero(t, tg.USDT.SemaphoreOffset, "no semaphore")
	assert.Len(t, tg.USDT.Args, 4)
	assert.Equal(t, []string{"c10::reportOutOfMemoryToProfiler"}, pf.cudaSymbols(), "the library record names it")

	// Without the block layer (--pool off) it is not probed.
	pf, err = scanFile(candidate{Path: c10, OpenPath: c10}, nil, false, nil)
	require.NoError(t, err)
	assert.Nil(t, pf)

	cuda := filepath.Join(lib, "libc10_cuda.so.2.6")
	_, _, imported := want(cuda)
	require.True(t, imported, "libc10_cuda.so imports %s", sym)
	pf, err = scanFile(candidate{Path: cuda, OpenPath: cuda}, nil, true, nil)
	require.NoError(t, err)
	require.NotNil(t, pf, "libc10_cuda.so has its USDT sites")
	for _, tg := range pf.Targets {
		assert.NotEqual(t, event.APIC10ReportOOM, tg.Spec.API, "an import is not probed")
	}
}
