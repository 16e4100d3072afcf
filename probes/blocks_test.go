//go:build linux

package probes

import (
	"bufio"
	"context"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

// blockCounter counts the block-layer events a session writes, by kind;
// safe to read while the session runs.
type blockCounter struct{ allocs, frees atomic.Uint64 }

func (c *blockCounter) Write(rec event.Record) error {
	if e, ok := rec.(*event.Event); ok && e.Layer == event.LayerBlock {
		switch e.Kind {
		case event.KindAlloc:
			c.allocs.Add(1)
		case event.KindFree:
			c.frees.Add(1)
		}
	}
	return nil
}

func (c *blockCounter) Flush() error { return nil }

// TestBlockFilterChange: the block layer's probe keeps, per thread, what the
// target filter said of its process (bpf/vramprof/blocks.h), and asks
// again once a process has left the targets. pool_pause makes 500 block
// pairs on its main thread, waits on stdin, and makes 500 more; between the
// two the process leaves the targets (as untrack takes it out): the thread
// that passed the filter 1000 times must not pass it again. The first
// phase's pairs are recorded, every one; the second's, none.
func TestBlockFilterChange(t *testing.T) {
	probetest.RequirePrivilege(t)
	const pairs = 500
	sink := &blockCounter{}
	s, err := NewSession(Options{Sink: sink})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })

	stdin, feed := io.Pipe()
	out, stdout := io.Pipe()
	cmd, err := s.Launch(LaunchOptions{
		Argv:  []string{probetest.Bin(t, "pool_pause"), "500"},
		Stdin: stdin, Stdout: stdout, Stderr: os.Stderr,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "pool_pause's first line")
	require.Equal(t, "phase1 done", lines.Text())
	// Out of the targets, as procTable.untrack does it (BPF maps and the
	// filter's epoch only: nothing the running session holds).
	s.procs.host.untarget(uint32(cmd.Process.Pid))
	_, err = feed.Write([]byte{1})
	require.NoError(t, err)
	require.NoError(t, feed.Close())
	require.True(t, lines.Scan(), "pool_pause's second line")
	require.Equal(t, "phase2 done", lines.Text())
	go func() { _, _ = io.Copy(io.Discard, out) }()
	require.NoError(t, cmd.Wait())
	require.NoError(t, stdout.Close())
	// Not a target any more, its exit is not announced: stop, reading what
	// the ring buffer holds.
	cancel()
	require.NoError(t, <-done)
	assert.EqualValues(t, pairs, sink.allocs.Load(), "block allocations: the first phase's")
	assert.EqualValues(t, pairs, sink.frees.Load(), "block frees: the first phase's")
	assert.Zero(t, s.Stats().Lost.Load())
}
