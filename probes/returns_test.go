//go:build linux

package probes

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
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
				"call_enter": s.objs.CallEnter, "call_enter_multi": s.objs.CallEnterMulti,
				"call_return": s.objs.CallReturn, "call_return_multi": s.objs.CallReturnMulti,
				"usdt_block": s.objs.UsdtBlock, "spec_enter": s.objs.SpecEnter,
				"spec_return": s.objs.SpecReturn, "loader_state": s.objs.LoaderState,
			} {
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
