//go:build linux

package probes

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/allocspec"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/probes/probetest/bare"
)

func mustSpecs(t *testing.T, text string) []allocspec.Allocator {
	t.Helper()
	specs, err := allocspec.Parse("test.spec", strings.NewReader(text))
	require.NoError(t, err)
	return specs
}

// TestSpecTargets: a spec's functions found in a compiled library, with
// their return instructions; arguments laid out for the BPF side; a
// function that tail-calls out is left unprobed with the reason.
func TestSpecTargets(t *testing.T) {
	lib := probetest.Lib(t, "libtinypool.so")
	specs := mustSpecs(t, `
allocator tiny
library libtinypool.so
alloc ptr=ret size=arg1 tiny_alloc
alloc ptr=ret size=arg7 tiny_alloc7
alloc ptr=ret size=arg1 tiny_alloc_tail
free ptr=arg1 tiny_free
`)
	pf, err := scanFile(candidate{Path: lib, OpenPath: lib}, nil, false, specs)
	require.NoError(t, err)
	require.NotNil(t, pf)
	byName := map[string]target{}
	for _, tg := range pf.Targets {
		require.Equal(t, progSpec, tg.Spec.Prog)
		byName[tg.Spec.Symbol] = tg
	}
	require.Contains(t, byName, "tiny_alloc")
	require.Contains(t, byName, "tiny_alloc7")
	require.Contains(t, byName, "tiny_free")
	assert.NotContains(t, byName, "tiny_alloc_tail")

	a := byName["tiny_alloc"]
	assert.Equal(t, event.APISpecAlloc, a.Spec.API)
	assert.Equal(t, event.KindAlloc, a.Spec.Kind)
	assert.True(t, a.Func.AtReturn)
	assert.NotEmpty(t, a.Func.Returns, "tiny_alloc's return instructions")
	for _, r := range a.Func.Returns {
		assert.Greater(t, r, a.Offset, "returns lie after the entry")
	}
	// size=arg1: %rdi; the pointer is the result, not read from the spec.
	assert.Equal(t, uint8(bpfUsdtArgKindUSDT_ARG_REG), a.Func.Args.Args[2].Kind)
	assert.Equal(t, uint16(112), a.Func.Args.Args[2].RegOff, "pt_regs.di")
	assert.Equal(t, uint8(bpfUsdtArgKindUSDT_ARG_NONE), a.Func.Args.Args[0].Kind)
	// size=arg7: the first stack slot above the return address at entry.
	a7 := byName["tiny_alloc7"].Func.Args.Args[2]
	assert.Equal(t, uint8(bpfUsdtArgKindUSDT_ARG_MEM), a7.Kind)
	assert.Equal(t, uint16(152), a7.RegOff, "pt_regs.sp")
	assert.Equal(t, uint64(8), a7.ValOff)
	assert.Equal(t, int8(8), a7.Size)

	f := byName["tiny_free"]
	assert.Equal(t, event.APISpecFree, f.Spec.API)
	assert.False(t, f.Func.AtReturn, "a free is read at entry alone")
	assert.Empty(t, f.Func.Returns)
	assert.Equal(t, uint16(112), f.Func.Args.Args[0].RegOff, "ptr=arg1: pt_regs.di")

	require.Len(t, pf.Skipped, 1)
	assert.Contains(t, pf.Skipped[0], "tiny_alloc_tail (tiny): jumps out of the function")

	// A file no spec's library glob names is not read for them.
	other := probetest.Lib(t, "librmm.so")
	pf, err = scanFile(candidate{Path: other, OpenPath: other}, nil, false, specs)
	require.NoError(t, err)
	assert.Nil(t, pf)
}

// TestUretprobeTerminatesThrowingCPlusPlus is the control for the design
// rule "never a uretprobe on C++ code": with a plain uretprobe on RMM's
// do_allocate, spec_rmm_oom's first rmm::out_of_memory cannot unwind
// through the trampoline and the process dies, where under vramprof (entry
// probes and probes on return instructions) it exits 0
// (cmd/vramprof TestRunAllocatorSpecs).
func TestUretprobeTerminatesThrowingCPlusPlus(t *testing.T) {
	probetest.RequirePrivilege(t)
	lib := probetest.Lib(t, "librmm.so")
	pf, err := scanFile(candidate{Path: lib, OpenPath: lib}, nil, false, allocspec.Builtin())
	require.NoError(t, err)
	require.NotNil(t, pf)
	var off uint64
	for _, tg := range pf.Targets {
		if strings.Contains(tg.Spec.Symbol, "::do_allocate(") {
			off = tg.Offset
		}
	}
	require.NotZero(t, off, "do_allocate in librmm.so")
	p, err := bare.Attach(lib, off)
	require.NoError(t, err)
	defer p.Close()

	cmd := exec.Command(probetest.Bin(t, "spec_rmm_oom"))
	cmd.Env = append(os.Environ(), "VRAMPROF_TRUTH="+filepath.Join(t.TempDir(), "truth.json"))
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the throw must not survive a uretprobe:\n%s", out)
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	assert.True(t, ws.Signaled(), "killed by a signal (terminate: SIGABRT), got %v:\n%s", cmd.ProcessState, out)
	enters, _, err := p.Counts()
	require.NoError(t, err)
	assert.NotZero(t, enters, "the uretprobe's entry probe saw do_allocate")
}
