//go:build linux

package probes

import (
	"encoding/binary"
	"fmt"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/symbolize"
)

// stackTable turns raw stacks into Stack records: it symbolizes each stack
// the first time a process shows it, writes its Mapping and Stack records
// to the sink, and gives it a StackID that later records of the same stack
// reuse. It owns the symbolizer. An exited process's entries are dropped
// (forgetStacks), so a long session (attach --all, serve) holds the stacks
// of live processes only; IDs are never reused. Not safe for concurrent
// use.
type stackTable struct {
	sink Sink
	sym  *symbolize.Symbolizer
	// stacks interns raw stacks by PID and frames; stackSeq is the last
	// StackID given.
	stacks   map[string]event.StackID
	stackSeq event.StackID
	stackKey []byte // the key being built, reused
}

func newStackTable(sink Sink) *stackTable {
	return &stackTable{sink: sink, sym: symbolize.New(symbolize.Options{}), stacks: make(map[string]event.StackID)}
}

// forgetStacks drops pid's interned stacks (keys start with the PID): a
// later process with that PID has other stacks, interned afresh.
func (t *stackTable) forgetStacks(pid uint32) {
	var prefix [4]byte
	binary.LittleEndian.PutUint32(prefix[:], pid)
	for k := range t.stacks {
		if len(k) >= 4 && k[:4] == string(prefix[:]) {
			delete(t.stacks, k)
		}
	}
}

// intern returns the StackID of the raw stack of pid, symbolizing it and
// writing its Mapping and Stack records the first time it is seen. py is
// the process's CPython, nil when it has none (its Python frames then stay
// out of the stack).
func (t *stackTable) intern(pid uint32, frames, raw []uint64, pyFlags uint8, py *pyProc) (event.StackID, error) {
	key := t.stackKey[:0]
	key = binary.LittleEndian.AppendUint32(key, pid)
	key = binary.LittleEndian.AppendUint16(key, uint16(len(frames)))
	for _, f := range frames {
		key = binary.LittleEndian.AppendUint64(key, f)
	}
	key = append(key, pyFlags)
	for _, f := range raw {
		key = binary.LittleEndian.AppendUint64(key, f)
	}
	t.stackKey = key
	if id, ok := t.stacks[string(key)]; ok { // no allocation: the compiler sees the lookup
		return id, nil
	}
	// Python code objects first: they are read from the process's memory,
	// which an exiting process frees soon; the native symbols come from
	// files and can wait (the first lookup in a large library with DWARF
	// lines takes a while).
	var segs [][]event.Frame
	if py != nil && len(raw) > 0 {
		segs = pySegments(py, raw, pyFlags)
	}
	syms, maps, err := t.sym.Symbolize(pid, frames)
	if err != nil {
		// An unsymbolizable stack is still a stack: keep the addresses.
		syms = make([]event.Frame, len(frames))
		for i, a := range frames {
			syms[i] = event.Frame{Addr: a}
		}
		maps = nil
	}
	syms = mergeStacks(syms, segs)
	for i := range maps {
		if err := t.sink.Write(&maps[i]); err != nil {
			return 0, fmt.Errorf("write mapping record: %w", err)
		}
	}
	t.stackSeq++
	id := t.stackSeq
	t.stacks[string(key)] = id
	if err := t.sink.Write(&event.Stack{ID: id, PID: pid, Frames: syms}); err != nil {
		return 0, fmt.Errorf("write stack record: %w", err)
	}
	return id, nil
}
