//go:build linux

package probes

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/probes/probetest/bare"
	"github.com/vramprof/vramprof/probes/symbolize"
)

// uprobeMultiReturn is the kernel's BPF_F_UPROBE_MULTI_RETURN: a
// uprobe_multi link whose programs run at the functions' returns
// (uretprobes).
const uprobeMultiReturn = 1

// TestNoUretprobe runs scenarios that make vramprof place every kind of
// probe it has (CUDA runtime and driver calls, a runtime linked into a
// library beside the shared one, the caching allocator's USDT sites, an
// allocator spec's functions, a C++ runtime that throws) and reads back,
// from the kernel's list of BPF links, every link of the session's
// programs while they are attached: none may be a uretprobe, single
// (perf event of type uretprobe) or multi (the return flag), and the
// returns of the CUDA calls are probed all the same (call_return's
// uprobe_multi link covers at least one instruction per probed function).
func TestNoUretprobe(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, name := range []string{"steady", "static_lib", "pool_steady", "spec_rmm", "cxx_throw"} {
		t.Run(name, func(t *testing.T) {
			s, code := runHeld(t, name)
			if name == "cxx_throw" {
				require.Equal(t, 3, code, "cxx_throw catches std::bad_alloc: exit 3")
			} else {
				require.Zero(t, code, "exit code")
			}
			progs := make(map[ebpf.ProgramID]string)
			for name, p := range map[string]*ebpf.Program{
				"call_enter": s.loader.objs.CallEnter, "call_enter_multi": s.loader.objs.CallEnterMulti,
				"call_return": s.loader.objs.CallReturn, "call_return_multi": s.loader.objs.CallReturnMulti,
				"usdt_block": s.loader.objs.UsdtBlock, "spec_enter": s.loader.objs.SpecEnter,
				"spec_return": s.loader.objs.SpecReturn, "loader_state": s.loader.objs.LoaderState,
			} {
				if p == nil {
					continue // loaded on first use: not used here
				}
				info, err := p.Info()
				require.NoError(t, err)
				id, ok := info.ID()
				require.True(t, ok, "program id of %s", name)
				progs[id] = name
			}
			kinds := map[string]int{}
			returnOffsets := 0
			var it link.Iterator
			defer it.Close()
			for it.Next() {
				info, err := it.Link.Info()
				require.NoError(t, err)
				prog, ours := progs[info.Program]
				if !ours {
					continue // another session's, or not vramprof's
				}
				kinds[prog]++
				switch info.Type {
				case link.UprobeMultiType:
					um := info.UprobeMulti()
					require.NotNil(t, um, "uprobe_multi info of %s", prog)
					assert.Zero(t, um.Flags&uprobeMultiReturn, "%s attached as a uretprobe_multi link", prog)
					if prog == "call_return_multi" {
						returnOffsets += int(um.Count)
					}
				case link.PerfEventType:
					pe := info.PerfEvent()
					require.NotNil(t, pe, "perf event info of %s", prog)
					assert.Equal(t, link.PerfEventUprobe, pe.Type, "%s attached as a perf event of type %d (uretprobe: %d)", prog, pe.Type, link.PerfEventUretprobe)
					if prog == "call_return" {
						returnOffsets++
					}
				default:
					t.Errorf("%s attached by a link of type %v", prog, info.Type)
				}
			}
			require.NoError(t, it.Err())
			t.Logf("links by program: %v; call_return at %d instructions", kinds, returnOffsets)
			assert.Positive(t, kinds["call_enter_multi"]+kinds["call_enter"], "CUDA calls probed")
			// Each file's functions: cudaMalloc and cudaFree at least, one
			// return instruction each.
			assert.GreaterOrEqual(t, returnOffsets, 2, "return instructions of the CUDA calls probed")
			switch name {
			case "pool_steady":
				assert.Positive(t, kinds["usdt_block"], "USDT sites probed")
			case "spec_rmm":
				assert.Positive(t, kinds["spec_return"], "spec'd functions' returns probed")
			}
		})
	}
}

// runHeld runs a scenario to its end under a session, with the allocator
// specs built in, and returns the session with its probes still attached
// (closed at the test's cleanup) and the exit code.
func runHeld(t *testing.T, name string) (*Session, int) {
	t.Helper()
	bin := probetest.Bin(t, name)
	s, err := NewSession(Options{Sink: &memSink{}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	cmd, err := s.Launch(LaunchOptions{
		Argv:   []string{bin},
		Env:    append(os.Environ(), "VRAMPROF_TRUTH="+filepath.Join(t.TempDir(), "truth.json")),
		Stdout: os.Stderr, Stderr: os.Stderr,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitErr := cmd.Wait()
	code := 0
	if waitErr != nil {
		code = cmd.ProcessState.ExitCode()
	}
	require.NoError(t, <-done)
	return s, code
}

// TestAnotherTracersUretprobes runs a scenario while another tracer on the
// host holds uretprobes on the same functions (the bare counting probe,
// attached as vramprof attached its returns before): the kernel puts the
// uretprobe trampoline in place of the return address after the entry
// probes ran, and vramprof must still take a driver call for nested in its
// runtime call, not the runtime call for one an exception left. Every
// cudaMalloc and cudaFree is recorded as the scenario made it, nothing lost.
func TestAnotherTracersUretprobes(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, lib := range []struct {
		name string
		apis []event.API
	}{
		{"libcudart.so.12", []event.API{event.APICudaMalloc, event.APICudaFree}},
		{"libcuda.so.1", []event.API{event.APICuMemAlloc, event.APICuMemFree}},
	} {
		path := probetest.Lib(t, lib.name)
		pf, err := scanFile(candidate{Path: path, OpenPath: path}, cudaProbes, false, nil)
		require.NoError(t, err)
		require.NotNil(t, pf)
		var offs []uint64
		for _, tg := range pf.Targets {
			if slices.Contains(lib.apis, tg.Spec.API) {
				offs = append(offs, tg.Offset)
			}
		}
		require.Len(t, offs, len(lib.apis))
		other, err := bare.Attach(path, offs...)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, other.Close()) })
	}

	sink, truth, code := runScenario(t, "steady")
	require.Zero(t, code, "exit code")
	assert.Zero(t, sink.lost, "lost events")
	var want, got []string
	for _, c := range truth.Calls {
		switch c.API {
		case "cudaMalloc":
			want = append(want, callKey(c.API, c.TID, c.Size, c.Ptr, c.Ret))
		case "cudaFree":
			want = append(want, callKey(c.API, c.TID, 0, c.Ptr, 0))
		}
	}
	nested := 0
	for _, e := range sink.events {
		switch e.API {
		case event.APICudaMalloc:
			got = append(got, callKey("cudaMalloc", e.TID, e.Size, e.Addr, e.Ret))
		case event.APICudaFree:
			got = append(got, callKey("cudaFree", e.TID, 0, e.Addr, 0))
		case event.APICuMemAlloc, event.APICuMemFree:
			if e.Flags&event.FlagNested != 0 {
				nested++
			}
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	require.NotEmpty(t, want)
	assert.Equal(t, want, got)
	// Each runtime call made one driver call, nested in it (README).
	assert.Equal(t, len(want), nested, "driver calls nested in their runtime call")
}

// TestCallReturnsFollowsTailCalls: testdata's libcudart_throw.so's cudaFree
// is one jmp to free_device (a tail call): its returns are free_device's
// return instructions, not its own, and cudaMalloc's are its own.
func TestCallReturnsFollowsTailCalls(t *testing.T) {
	f, err := symbolize.OpenFile(probetest.Lib(t, "libcudart_throw.so"))
	require.NoError(t, err)
	defer f.Close()
	entries := map[uint64]bool{}
	for _, name := range []string{"cudaMalloc", "cudaFree"} {
		sym, ok := f.Lookup(name)
		require.True(t, ok, name)
		entries[sym.Value] = true
	}

	free, _ := f.Lookup("cudaFree")
	var impl symbolize.Symbol
	for _, s := range f.Symbols(func(n string) bool { return strings.Contains(n, "free_device") }) {
		impl = s
	}
	require.NotZero(t, impl.Value, "free_device in .symtab")
	implRets, tails, err := functionExits(f, impl)
	require.NoError(t, err)
	require.Empty(t, tails)
	require.NotEmpty(t, implRets)

	cf, err := callReturns(f, free, entries)
	require.NoError(t, err)
	var want []callReturn
	for _, r := range implRets {
		off, err := f.FileOffset(r)
		require.NoError(t, err)
		want = append(want, callReturn{Offset: off, Own: false})
	}
	assert.Equal(t, want, cf.Returns, "cudaFree returns where free_device does")
	assert.False(t, cf.TailCalls, "free_device is not probed")

	malloc, _ := f.Lookup("cudaMalloc")
	cf, err = callReturns(f, malloc, entries)
	require.NoError(t, err)
	require.NotEmpty(t, cf.Returns)
	for _, r := range cf.Returns {
		assert.True(t, r.Own, "cudaMalloc's return at %#x is its own", r.Offset)
	}
}
