//go:build linux

package probes

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// stackSink keeps the Stack records written, in order.
type stackSink struct{ stacks []event.Stack }

func (s *stackSink) Write(rec event.Record) error {
	if st, ok := rec.(*event.Stack); ok {
		s.stacks = append(s.stacks, *st)
	}
	return nil
}

func (s *stackSink) Flush() error { return nil }

// TestStackTableIntern: a stack is written once per process and keeps its
// ID; a process's stacks are interned afresh once forgotten, and IDs are
// never reused. The PIDs do not exist, so the frames keep their addresses.
func TestStackTableIntern(t *testing.T) {
	const gone, other = 1 << 30, 1<<30 + 1
	sink := &stackSink{}
	st := newStackTable(sink)
	t.Cleanup(func() { _ = st.sym.Close() })
	intern := func(pid uint32, frames ...uint64) event.StackID {
		t.Helper()
		id, err := st.intern(pid, le64(frames...), 0, 0, nil, nil)
		require.NoError(t, err)
		return id
	}
	assert.Equal(t, event.StackID(1), intern(gone, 0x1000, 0x2000))
	assert.Equal(t, event.StackID(1), intern(gone, 0x1000, 0x2000), "seen: same ID")
	assert.Equal(t, event.StackID(2), intern(gone, 0x1000), "a prefix is another stack")
	assert.Equal(t, event.StackID(3), intern(other, 0x1000, 0x2000), "another process")
	require.Len(t, sink.stacks, 3)
	assert.Equal(t, event.Stack{ID: 1, PID: gone, Frames: []event.Frame{{Addr: 0x1000}, {Addr: 0x2000}}}, sink.stacks[0])

	st.forgetStacks(gone)
	assert.Equal(t, event.StackID(4), intern(gone, 0x1000, 0x2000), "forgotten: a new ID")
	assert.Equal(t, event.StackID(3), intern(other, 0x1000, 0x2000), "another process's stays")
	assert.Len(t, sink.stacks, 4)

	// The Python frames' flags are part of the stack.
	id, err := st.intern(other, le64(0x1000, 0x2000), 0, recFlagPyTrunc, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, event.StackID(5), id)
}
