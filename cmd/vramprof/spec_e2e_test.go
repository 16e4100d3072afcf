//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// specReport is the part of report.json the allocator-spec tests read.
type specReport struct {
	poolReport
	Libraries []struct {
		Path    string   `json:"path"`
		Symbols []string `json:"symbols"`
		Skipped []string `json:"skipped"`
	} `json:"libraries"`
}

// runWith runs a scenario under vramprof with extra flags before "--".
func runWith(t *testing.T, name string, flags ...string) (string, *probetest.Truth, result) {
	t.Helper()
	bin := probetest.Bin(t, name)
	tmp := t.TempDir()
	truthPath := filepath.Join(tmp, "truth.json")
	dir := filepath.Join(tmp, "out")
	args := append(append([]string{"run", "-o", dir}, flags...), "--", bin)
	r := vramprof(t, execOpts{env: []string{"VRAMPROF_TRUTH=" + truthPath}, dir: tmp}, args...)
	return dir, probetest.MustReadTruth(t, truthPath), r
}

// TestRunAllocatorSpecs profiles allocators that carry no USDT probes, by
// allocator specs: the built-in ones for XLA's BFC allocator and RMM's pool
// (testdata fakes with the real mangled names), and a user spec
// (--allocators) for a C pool. The block layer equals each program's own
// truth to the byte, failed allocations (a NULL result) included; the
// segment layer underneath is unchanged (a cudaMalloc made inside a spec'd
// allocation is an ordinary allocation, counted once). spec_rmm_oom throws
// rmm::out_of_memory out of do_allocate ten times and catches it: it exits
// 0 under vramprof because no uretprobe is on C++ code.
func TestRunAllocatorSpecs(t *testing.T) {
	probetest.RequirePrivilege(t)
	tinySpec := filepath.Join(probetest.Root(), "testdata", "specs", "tiny.spec")
	for _, tc := range []struct {
		name  string
		flags []string
		lib   string
		syms  []string
	}{
		{"spec_bfc", nil, "libtensorflow_framework.so.2", []string{
			"tsl::BFCAllocator::AllocateRaw(unsigned long, unsigned long, tsl::AllocationAttributes const&)",
			"tsl::BFCAllocator::DeallocateRaw(void*)"}},
		{"spec_rmm", nil, "librmm.so", []string{
			"rmm::mr::detail::stream_ordered_memory_resource<rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource>, rmm::mr::detail::coalescing_free_list>::do_allocate(unsigned long, rmm::cuda_stream_view)",
			"rmm::mr::detail::stream_ordered_memory_resource<rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource>, rmm::mr::detail::coalescing_free_list>::do_deallocate(void*, unsigned long, rmm::cuda_stream_view)"}},
		{"spec_rmm_oom", nil, "librmm.so", nil},
		// tiny_alloc7 calls tiny_alloc: nested, the outer call counts once.
		{"spec_tiny", []string{"--allocators", tinySpec}, "libtinypool.so", []string{"tiny_alloc", "tiny_alloc7", "tiny_free"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, truth, r := runWith(t, tc.name, tc.flags...)
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			require.NotNil(t, truth.Blocks)
			rep := mustReadJSON[specReport](t, filepath.Join(dir, "report.json"))
			require.NotNil(t, rep.Blocks, "report.json has the blocks section")
			assert.Equal(t, *truth.Blocks, probetest.Blocks(*rep.Blocks), "blocks")

			assert.Equal(t, truth.Totals.Allocations, rep.Totals.Allocations, "segment allocations")
			assert.Equal(t, truth.Totals.FailedAllocations, rep.Totals.FailedAllocations, "failed segment allocations")
			assert.Equal(t, truth.Totals.Frees, rep.Totals.Frees, "segment frees")
			assert.Equal(t, truth.Totals.PeakBytes, rep.Totals.PeakBytes, "segment peak")
			assert.Equal(t, truth.Totals.LiveBytesAtEnd, rep.Totals.LiveBytesAtEnd, "segment live at end")
			assert.Zero(t, rep.Totals.LostEvents, "lost records, by cause: %+v", rep.Totals.LostCauses)

			var found bool
			for _, l := range rep.Libraries {
				if filepath.Base(l.Path) == tc.lib {
					found = true
					if tc.syms != nil {
						assert.ElementsMatch(t, tc.syms, l.Symbols, "functions probed in %s", tc.lib)
					}
					assert.Empty(t, l.Skipped, "nothing skipped")
				}
			}
			assert.True(t, found, "%s is listed among the libraries", tc.lib)
			if truth.Totals.FailedAllocations == 0 { // failed cudaMallocs add oom-<n>.pb.gz, which checkReplay does not expect
				checkReplay(t, dir)
			}
		})
	}

	t.Run("skipped function", func(t *testing.T) {
		// tiny_alloc_tail tail-calls tiny_alloc: its returns are not its
		// own, so it is left unprobed, and the reports say so.
		text, err := os.ReadFile(tinySpec)
		require.NoError(t, err)
		spec := filepath.Join(t.TempDir(), "tail.spec")
		require.NoError(t, os.WriteFile(spec, append(text, "alloc ptr=ret size=arg1 tiny_alloc_tail\n"...), 0o644))
		dir, truth, r := runWith(t, "spec_tiny", "--allocators", spec)
		require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
		rep := mustReadJSON[specReport](t, filepath.Join(dir, "report.json"))
		require.NotNil(t, rep.Blocks)
		assert.Equal(t, *truth.Blocks, probetest.Blocks(*rep.Blocks), "blocks: the others are probed")
		var skipped []string
		for _, l := range rep.Libraries {
			skipped = append(skipped, l.Skipped...)
		}
		require.Len(t, skipped, 1)
		assert.Regexp(t, `^tiny_alloc_tail \(tinypool\): jumps out of the function at 0x[0-9a-f]+: to 0x[0-9a-f]+$`, skipped[0])
		md, err := os.ReadFile(filepath.Join(dir, "report.md"))
		require.NoError(t, err)
		assert.Regexp(t, `\nWarning: not probed in [^\n]*/libtinypool\.so: tiny\\_alloc\\_tail \(tinypool\): jumps out of the function at 0x`, string(md))
	})
	t.Run("pool off", func(t *testing.T) {
		dir, truth, r := runWith(t, "spec_bfc", "--pool", "off")
		require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
		rep := mustReadJSON[specReport](t, filepath.Join(dir, "report.json"))
		assert.Nil(t, rep.Blocks, "--pool off: no allocator specs either")
		assert.Equal(t, truth.Totals.Allocations, rep.Totals.Allocations, "segments still traced")
	})
	t.Run("no spec for the library", func(t *testing.T) {
		dir, truth, r := runWith(t, "spec_tiny")
		require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
		rep := mustReadJSON[specReport](t, filepath.Join(dir, "report.json"))
		assert.Nil(t, rep.Blocks, "libtinypool.so has no built-in spec")
		assert.Equal(t, truth.Totals.Allocations, rep.Totals.Allocations, "segments still traced")
	})
}

// TestAllocatorsBadFile: a bad spec file stops run and attach before
// anything is traced, with one line naming file:line, what is wrong and
// what to write instead, and exit 2.
func TestAllocatorsBadFile(t *testing.T) {
	tmp := t.TempDir()
	bad := filepath.Join(tmp, "bad.spec")
	require.NoError(t, os.WriteFile(bad, []byte("allocator p\nlibrary libp.so\nalloc ptr=ret size=arg0 p::alloc(unsigned long)\nfree ptr=arg2 p::free(void*)\n"), 0o644))
	const want = ":3: size=arg0: arguments count from 1 (`this` is arg1 of a method): use arg1..arg16"
	missing := filepath.Join(tmp, "missing.spec")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--allocators", bad, "--", "true"}, bad + want},
		{[]string{"attach", "-p", "1", "--allocators", bad}, bad + want},
		{[]string{"run", "--allocators", missing, "--", "true"}, missing + ": no such file or directory"},
	} {
		r := vramprof(t, execOpts{dir: tmp}, tc.args...)
		assert.Equal(t, 2, r.code, "%v: stderr:\n%s", tc.args, r.stderr)
		lines := r.stderrLines()
		require.Len(t, lines, 1, "%v: one line:\n%s", tc.args, r.stderr)
		assert.Contains(t, lines[0], tc.want)
	}
}
