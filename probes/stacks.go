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

// intern returns the StackID of a raw stack of pid, symbolizing it and
// writing its Mapping and Stack records the first time it is seen. frames
// and raw are the record's native and Python frames as little-endian
// uint64s (rawRecord.frames, rawRecord.pyFrames), caller its caller's
// return address (see appendFrames). py is the process's CPython, nil when
// it has none (its Python frames then stay out of the stack).
//
// The key is built by copying the frames whole, and nothing is decoded or
// allocated, unless the stack is new.
func (t *stackTable) intern(pid uint32, frames []byte, caller uint64, pyFlags uint8, raw []byte, py *pyProc) (event.StackID, error) {
	key := binary.LittleEndian.AppendUint32(t.stackKey[:0], pid)
	key = append(key, 0, 0) // the frame count, once known
	key = appendFrames(key, frames, caller)
	n := (len(key) - 6) / 8
	binary.LittleEndian.PutUint16(key[4:], uint16(n))
	key = append(key, pyFlags)
	key = append(key, raw...)
	t.stackKey = key
	if id, ok := t.stacks[string(key)]; ok { // no allocation: the compiler sees the lookup
		return id, nil
	}
	return t.internNew(pid, key, n, pyFlags, py)
}

// internNew interns a stack not seen yet, key being its key (see intern) and n
// its native frames.
func (t *stackTable) internNew(pid uint32, key []byte, n int, pyFlags uint8, py *pyProc) (event.StackID, error) {
	frames := uint64s(key[6 : 6+8*n])
	raw := uint64s(key[6+8*n+1:])
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

// uint64s decodes little-endian uint64s.
func uint64s(b []byte) []uint64 {
	out := make([]uint64, len(b)/8)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return out
}
