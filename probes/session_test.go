//go:build linux

package probes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

// memSink keeps every record, copying events (the session reuses them).
type memSink struct {
	events []event.Event
	stacks map[event.StackID]*event.Stack
	libs   []*event.Library
	lost   uint64
	procs  []*event.Process
	// phases are the test phases, and phaseAt how many events came
	// before each.
	phases  []*event.TestPhase
	phaseAt []int
}

func (m *memSink) Write(rec event.Record) error {
	switch r := rec.(type) {
	case *event.Event:
		m.events = append(m.events, *r)
	case *event.Stack:
		if m.stacks == nil {
			m.stacks = make(map[event.StackID]*event.Stack)
		}
		m.stacks[r.ID] = r
	case *event.Library:
		m.libs = append(m.libs, r)
	case *event.Lost:
		m.lost = r.Total
	case *event.Process:
		m.procs = append(m.procs, r)
	case *event.TestPhase:
		m.phases = append(m.phases, r)
		m.phaseAt = append(m.phaseAt, len(m.events))
	}
	return nil
}

func (m *memSink) Flush() error { return nil }

// runScenario runs a scenario program under a session and returns what the
// session recorded and what the program says it did.
func runScenario(t *testing.T, name string, env ...string) (*memSink, *probetest.Truth, int) {
	t.Helper()
	probetest.RequirePrivilege(t)
	truthPath := filepath.Join(t.TempDir(), "truth.json")
	sink, code := runProgram(t, []string{probetest.Bin(t, name)}, append(env, "VRAMPROF_TRUTH="+truthPath)...)
	return sink, probetest.MustReadTruth(t, truthPath), code
}

// runProgram runs argv under a session, with env added to the test's, and
// returns what the session recorded and the program's exit code.
func runProgram(t *testing.T, argv []string, env ...string) (*memSink, int) {
	t.Helper()
	probetest.RequirePrivilege(t)

	sink := &memSink{}
	s, err := NewSession(Options{Sink: sink})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })

	cmd, err := s.Launch(LaunchOptions{
		Argv:   argv,
		Env:    append(os.Environ(), env...),
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
	return sink, code
}

// callKey identifies a call by what both sides see of it.
func callKey(api string, tid uint32, size, ptr uint64, ret int32) string {
	return fmt.Sprintf("%s tid=%d size=%d ptr=%#x ret=%d", api, tid, size, ptr, ret)
}

// TestSessionSeesEveryCall compares, call by call, what the probes recorded
// with what each scenario says it did: every cudaMalloc (with its size,
// returned pointer, return code and thread) and every cudaFree (pointer,
// thread), nothing missing, nothing extra, nothing lost.
func TestSessionSeesEveryCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		exit int
		libs int // CUDA runtime copies probed (plus the driver); 1 when zero
	}{
		{name: "steady"},
		{name: "leak"},
		{name: "oom", env: []string{"FAKECUDA_CAPACITY=1073741824"}, exit: 1},
		{name: "threads"},
		{name: "dlopen_runtime"},
		{name: "static_runtime"},
		{name: "hashed"},
		{name: "static_lib", libs: 2},
		// A C++ runtime whose cudaMalloc throws std::bad_alloc, caught by
		// the program (exit 3): the exception unwinds through the probed
		// function, and the calls after it pair as before.
		{name: "cxx_throw", exit: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink, truth, code := runScenario(t, tc.name, tc.env...)
			assert.Equal(t, tc.exit, code, "exit code")
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
			for _, e := range sink.events {
				switch e.API {
				case event.APICudaMalloc:
					got = append(got, callKey("cudaMalloc", e.TID, e.Size, e.Addr, e.Ret))
				case event.APICudaFree:
					got = append(got, callKey("cudaFree", e.TID, 0, e.Addr, 0))
				}
			}
			sort.Strings(want)
			sort.Strings(got)
			require.NotEmpty(t, want)
			assert.Equal(t, want, got)
			// A Library record names each runtime copy probed, once, and
			// the driver the runtime loads (libcuda.so.1).
			wantLibs := max(tc.libs, 1) + 1
			assert.Len(t, sink.libs, wantLibs, "probed libraries")
			var names []string
			for _, l := range sink.libs {
				names = append(names, filepath.Base(l.Path))
			}
			assert.Contains(t, names, "libcuda.so.1")

			// Every allocation's stack starts in the runtime's cudaMalloc and
			// names the scenario function that called it right after.
			funcOf := make(map[string]string)
			for _, c := range truth.Calls {
				if c.API == "cudaMalloc" {
					funcOf[callKey(c.API, c.TID, c.Size, c.Ptr, c.Ret)] = c.Func
				}
			}
			for _, e := range sink.events {
				if e.API != event.APICudaMalloc {
					continue
				}
				st := sink.stacks[e.Stack]
				require.NotNil(t, st, "allocation without a stack")
				require.GreaterOrEqual(t, len(st.Frames), 2)
				assert.Equal(t, "cudaMalloc", st.Frames[0].Function)
				assert.Equal(t, funcOf[callKey("cudaMalloc", e.TID, e.Size, e.Addr, e.Ret)], st.Frames[1].Function,
					"direct caller of cudaMalloc")
			}
		})
	}
}

// TestAttachWait attaches to dlopen_runtime while it sleeps, before it has
// loaded the CUDA runtime (it does after 300 ms): the session watches the
// loader and sees every call once the runtime arrives. (Without wait, such
// a process is ErrNoCUDA: TestAttachErrors.)
func TestAttachWait(t *testing.T) {
	probetest.RequirePrivilege(t)
	bin := probetest.Bin(t, "dlopen_runtime")
	truthPath := filepath.Join(t.TempDir(), "truth.json")

	// Load BPF first: the 300 ms are for attaching, not for loading.
	sink := &memSink{}
	s, err := NewSession(Options{Sink: sink})
	require.NoError(t, err)
	defer s.Close()

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "VRAMPROF_TRUTH="+truthPath)
	require.NoError(t, cmd.Start())
	if err := s.Attach(cmd.Process.Pid, true); err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("attach: %v (target: %v)", err, cmd.Wait())
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		require.NoError(t, err)
		require.NoError(t, <-done, "the session ends by itself when its target exits")
	case err := <-done:
		// The session ends once it reads the target's exit record, which
		// the kernel sends before the parent can reap the target: its
		// wait may come a little later. A session that ends without the
		// target exiting may leave it stopped at the loader: Close
		// resumes it, then it is killed, not waited for forever.
		select {
		case werr := <-waited:
			require.NoError(t, werr)
			require.NoError(t, err, "the session ends by itself when its target exits")
		case <-time.After(10 * time.Second):
			_ = s.Close()
			_ = cmd.Process.Kill()
			<-waited
			t.Fatalf("the session ended before its target: %v", err)
		}
	}

	truth := probetest.MustReadTruth(t, truthPath)
	var allocs, frees uint64
	for _, e := range sink.events {
		switch {
		case e.Flags&event.FlagNested != 0:
			// The driver call inside each runtime call: counted once.
		case e.Kind == event.KindAlloc && e.Ret == 0:
			allocs++
		case e.Kind == event.KindFree:
			frees++
		}
	}
	assert.Equal(t, truth.Totals.Allocations, allocs)
	assert.Equal(t, truth.Totals.Frees, frees)
	assert.Zero(t, sink.lost)
}

// TestAttachErrors: a PID that does not exist, and one without CUDA.
func TestAttachErrors(t *testing.T) {
	probetest.RequirePrivilege(t)
	s, err := NewSession(Options{Sink: &memSink{}})
	require.NoError(t, err)
	defer s.Close()
	require.ErrorIs(t, s.Attach(1<<30, false), ErrNoProcess)

	sleep := exec.Command("sleep", "10")
	require.NoError(t, sleep.Start())
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	require.ErrorIs(t, s.Attach(sleep.Process.Pid, false), ErrNoCUDA)
}
