//go:build linux

package main

// MemoryViz compatibility of `vramprof report --format snapshot`: PyTorch's
// viewer (torch/utils/viz/MemoryViz.js, pytorch.org/memory_viz) unpickles
// the file with its own small decoder and reads these fields:
//
//	snapshot.segments[]            device, address, total_size, stream,
//	                               frames (optional), blocks[]
//	segments[].blocks[]            size (blocks tile the segment from
//	                               address, in order), state
//	                               ("active_allocated", "active_pending_free",
//	                               others are free), requested_size, frames
//	snapshot.device_traces[d][]    one list per device index (a segment's
//	                               device must index it); action, addr, size,
//	                               stream, frames (optional), category
//	                               (optional), device_free (action "oom")
//	frames[]                       name, filename (strings), line
//
// Its decoder knows only these opcodes; any other is "UNKNOWN OPCODE". Its
// segment view replays the trace backwards from the final state and, at
// every event, places each live block in the live segment holding its
// address (a block in none throws), so the trace must be consistent with
// the segments, and the segments, one process's, must never overlap. This test decodes the export the way MemoryViz does and
// checks all of that. MemoryViz's own code is not vendored.

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
	pysnapshot "github.com/vramprof/vramprof/profile/snapshot"
)

// mvUnpickle decodes data with the opcodes MemoryViz.js's unpickle
// handles, and fails on any other. Dicts are map[string]any, lists and
// tuples []any, integers int64, floats float64.
func mvUnpickle(data []byte) (any, error) {
	var stack []any
	var marks []int
	memo := map[uint32]any{}
	var memoID uint32
	off := 0
	u8 := func() byte { b := data[off]; off++; return b }
	u32 := func() uint32 { v := binary.LittleEndian.Uint32(data[off:]); off += 4; return v }
	popMark := func() int { m := marks[len(marks)-1]; marks = marks[:len(marks)-1]; return m }
	setItems := func(d map[string]any, mark int) error {
		for i := mark; i+1 < len(stack); i += 2 {
			k, ok := stack[i].(string)
			if !ok {
				return fmt.Errorf("dict key %T", stack[i])
			}
			d[k] = stack[i+1]
		}
		stack = stack[:mark]
		return nil
	}
	for off < len(data) {
		op := u8()
		switch op {
		case 0x80: // PROTO
			if v := u8(); v < 2 || v > 4 {
				return nil, fmt.Errorf("unhandled version %d", v)
			}
		case 'a': // APPEND
			v := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			stack[len(stack)-1] = append(stack[len(stack)-1].([]any), v)
		case 'e': // APPENDS
			m := popMark()
			stack[m-1] = append(stack[m-1].([]any), stack[m:]...)
			stack = stack[:m]
		case 'l', 't': // LIST, TUPLE
			m := popMark()
			l := append([]any{}, stack[m:]...)
			stack = append(stack[:m], l)
		case 0x89:
			stack = append(stack, false)
		case 0x88:
			stack = append(stack, true)
		case 'N':
			stack = append(stack, nil)
		case 'h': // BINGET
			stack = append(stack, memo[uint32(u8())])
		case 'J': // BININT
			stack = append(stack, int64(int32(u32())))
		case 'K': // BININT1
			stack = append(stack, int64(u8()))
		case 'M': // BININT2
			v := binary.LittleEndian.Uint16(data[off:])
			off += 2
			stack = append(stack, int64(v))
		case '}':
			stack = append(stack, map[string]any{})
		case ']':
			stack = append(stack, []any{})
		case 0x95: // FRAME
			off += 8
		case 0x8a: // LONG1: MemoryViz makes a Number of up to 8 bytes
			n := int(u8())
			if n > 8 {
				return nil, fmt.Errorf("LONG1 of %d bytes: a BigInt in MemoryViz, which its arithmetic cannot mix with Numbers", n)
			}
			var b [8]byte
			copy(b[:], data[off:off+n])
			if n > 0 && b[n-1]&0x80 != 0 {
				for i := n; i < 8; i++ {
					b[i] = 0xff
				}
			}
			off += n
			v := int64(binary.LittleEndian.Uint64(b[:]))
			if v > 1<<53 || v < -(1<<53) {
				return nil, fmt.Errorf("integer %d loses precision as a JavaScript Number", v)
			}
			stack = append(stack, v)
		case 'j': // LONG_BINGET
			stack = append(stack, memo[u32()])
		case '(':
			marks = append(marks, len(stack))
		case 0x94: // MEMOIZE
			memo[memoID] = stack[len(stack)-1]
			memoID++
		case 'q': // BINPUT
			memo[uint32(u8())] = stack[len(stack)-1]
		case 'r': // LONG_BINPUT
			memo[u32()] = stack[len(stack)-1]
		case 'u': // SETITEMS
			m := popMark()
			if err := setItems(stack[m-1].(map[string]any), m); err != nil {
				return nil, err
			}
		case 's': // SETITEM
			v, k := stack[len(stack)-1], stack[len(stack)-2]
			stack = stack[:len(stack)-2]
			stack[len(stack)-1].(map[string]any)[k.(string)] = v
		case 'd': // DICT
			m := popMark()
			d := map[string]any{}
			if err := setItems(d, m); err != nil {
				return nil, err
			}
			stack = append(stack, d)
		case 0x8c: // SHORT_BINUNICODE
			n := int(u8())
			stack = append(stack, string(data[off:off+n]))
			off += n
		case 'X': // BINUNICODE
			n := int(u32())
			stack = append(stack, string(data[off:off+n]))
			off += n
		case '.':
			return stack[len(stack)-1], nil
		case ')':
			stack = append(stack, []any{})
		case 0x85:
			stack[len(stack)-1] = []any{stack[len(stack)-1]}
		case 0x86:
			t := append([]any{}, stack[len(stack)-2:]...)
			stack = append(stack[:len(stack)-2], t)
		case 0x87:
			t := append([]any{}, stack[len(stack)-3:]...)
			stack = append(stack[:len(stack)-3], t)
		case 'G': // BINFLOAT, big-endian
			stack = append(stack, math.Float64frombits(binary.BigEndian.Uint64(data[off:])))
			off += 8
		default:
			return nil, fmt.Errorf("UNKNOWN OPCODE: %d at byte %d", op, off-1)
		}
	}
	return nil, fmt.Errorf("no STOP")
}

// mvInt reads an integer field MemoryViz does arithmetic on.
func mvInt(t *testing.T, d map[string]any, key, where string) int64 {
	t.Helper()
	v, ok := d[key].(int64)
	require.True(t, ok, "%s: %q is %T, not an integer", where, key, d[key])
	return v
}

// mvFrames checks a frames list: dicts with string name and filename and
// an integer line.
func mvFrames(t *testing.T, v any, where string) {
	t.Helper()
	fs, ok := v.([]any)
	require.True(t, ok, "%s: frames is %T", where, v)
	for i, f := range fs {
		fd, ok := f.(map[string]any)
		require.True(t, ok, "%s: frame %d is %T", where, i, f)
		_, okName := fd["name"].(string)
		_, okFile := fd["filename"].(string)
		_, okLine := fd["line"].(int64)
		require.True(t, okName && okFile && okLine, "%s: frame %d %v", where, i, fd)
	}
}

type mvSeg struct{ addr, size int64 }
type mvBlock struct{ addr, size int64 }

// checkMemoryViz checks an exported snapshot against what MemoryViz reads
// and replays its segment view's state at every event.
func checkMemoryViz(t *testing.T, data []byte) {
	root, err := mvUnpickle(data)
	require.NoError(t, err)
	snap, ok := root.(map[string]any)
	require.True(t, ok, "top level is %T", root)
	segs, ok := snap["segments"].([]any)
	require.True(t, ok, "segments")
	traces, ok := snap["device_traces"].([]any)
	require.True(t, ok, "device_traces")

	// Per device: the final segments and live blocks.
	final := map[int64][]mvSeg{}
	live := map[int64]map[int64]mvBlock{}
	for i, s := range segs {
		sd, ok := s.(map[string]any)
		require.True(t, ok, "segment %d", i)
		where := fmt.Sprintf("segment %d", i)
		dev := mvInt(t, sd, "device", where)
		require.Less(t, dev, int64(len(traces)), "%s: device %d has no device_traces entry", where, dev)
		addr := mvInt(t, sd, "address", where)
		total := mvInt(t, sd, "total_size", where)
		mvInt(t, sd, "stream", where)
		if f, ok := sd["frames"]; ok {
			mvFrames(t, f, where)
		}
		blocks, ok := sd["blocks"].([]any)
		require.True(t, ok, "%s: blocks", where)
		at := addr
		if live[dev] == nil {
			live[dev] = map[int64]mvBlock{}
		}
		for j, b := range blocks {
			bd, ok := b.(map[string]any)
			require.True(t, ok, "%s block %d", where, j)
			bw := fmt.Sprintf("%s block %d", where, j)
			size := mvInt(t, bd, "size", bw)
			req := mvInt(t, bd, "requested_size", bw)
			assert.LessOrEqual(t, req, size, "%s: requested_size above size draws a negative rounding bar", bw)
			state, ok := bd["state"].(string)
			require.True(t, ok, "%s: state", bw)
			mvFrames(t, bd["frames"], bw)
			if state == "active_allocated" || state == "active_pending_free" {
				live[dev][at] = mvBlock{at, size}
			}
			at += size // MemoryViz places blocks by their sizes from address
		}
		assert.Equal(t, addr+total, at, "%s: blocks tile the segment", where)
		final[dev] = append(final[dev], mvSeg{addr, total})
	}

	known := map[string]bool{"alloc": true, "free_requested": true, "free_completed": true, "segment_alloc": true,
		"segment_free": true, "segment_map": true, "segment_unmap": true, "oom": true, "snapshot": true}
	for dev, tr := range traces {
		events, ok := tr.([]any)
		require.True(t, ok, "device_traces[%d] is %T", dev, tr)
		type ev struct {
			action     string
			addr, size int64
		}
		var evs []ev
		for i, e := range events {
			ed, ok := e.(map[string]any)
			require.True(t, ok, "event %d", i)
			where := fmt.Sprintf("device %d event %d", dev, i)
			action, ok := ed["action"].(string)
			require.True(t, ok && known[action], "%s: action %v", where, ed["action"])
			size := mvInt(t, ed, "size", where)
			mvInt(t, ed, "stream", where)
			if f, ok := ed["frames"]; ok {
				mvFrames(t, f, where)
			}
			var addr int64
			if action == "oom" {
				mvInt(t, ed, "device_free", where)
			} else {
				addr = mvInt(t, ed, "addr", where)
			}
			evs = append(evs, ev{action, addr, size})
		}
		// The segment view at event idx: undo the events after it, from
		// the end, as simulate_memory does; every live block must lie in a
		// live segment (find_segment, else a TypeError in draw).
		d := int64(dev)
		segsNow := append([]mvSeg{}, final[d]...)
		blocksNow := map[int64]mvBlock{}
		for k, v := range live[d] {
			blocksNow[k] = v
		}
		check := func(idx int) {
			// One process's segments never overlap: segments of several
			// processes at one address would draw each other's blocks.
			byAddr := slices.SortedFunc(slices.Values(segsNow), func(a, b mvSeg) int { return cmp.Compare(a.addr, b.addr) })
			for j := 1; j < len(byAddr); j++ {
				if !assert.True(t, byAddr[j-1].addr+byAddr[j-1].size <= byAddr[j].addr,
					"device %d at event %d: segments %#x and %#x overlap", dev, idx, byAddr[j-1].addr, byAddr[j].addr) {
					return
				}
			}
			for _, b := range blocksNow {
				in := false
				for _, s := range segsNow {
					if b.addr >= s.addr && b.addr < s.addr+s.size {
						in = true
						break
					}
				}
				if !assert.True(t, in, "device %d at event %d: block %#x in no segment", dev, idx, b.addr) {
					return
				}
			}
		}
		check(len(evs) - 1)
		for i := len(evs) - 1; i > 0; i-- {
			e := evs[i]
			switch e.action {
			case "free_completed":
				blocksNow[e.addr] = mvBlock{e.addr, e.size}
			case "alloc":
				delete(blocksNow, e.addr)
			case "segment_free", "segment_unmap":
				segsNow = append(segsNow, mvSeg{e.addr, e.size})
			case "segment_alloc", "segment_map":
				j := slices.IndexFunc(segsNow, func(s mvSeg) bool { return s.addr == e.addr })
				require.GreaterOrEqual(t, j, 0, "device %d event %d: segment_alloc of a segment not live after it", dev, i)
				segsNow = slices.Delete(segsNow, j, j+1)
			}
			check(i - 1)
		}
	}
}

// TestSnapshotMemoryViz exports traces of scenarios with and without a
// block layer, a hand-built attach with blocks of a segment allocated
// before tracing began, and a PyTorch snapshot re-exported, and reads each
// the way MemoryViz does.
func TestSnapshotMemoryViz(t *testing.T) {
	trace := func(t *testing.T, name string) string {
		dir, _, r := runScenario(t, name)
		require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
		return filepath.Join(dir, "trace.vpt")
	}
	for _, tc := range []struct {
		name  string
		root  bool // it records a scenario
		input func(t *testing.T) string
		check func(t *testing.T, data []byte, stderr string)
	}{
		{name: "pool_steady", root: true, input: func(t *testing.T) string { return trace(t, "pool_steady") }},
		{name: "pool_retry", root: true, input: func(t *testing.T) string { return trace(t, "pool_retry") }},
		{name: "four_devices", root: true, input: func(t *testing.T) string { return trace(t, "four_devices") }},
		{name: "untraced_segment", input: writeUntracedSegmentTrace, check: checkUntracedSegment},
		{name: "pytorch_fixture", input: func(*testing.T) string { return snapshotFixture }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				probetest.RequirePrivilege(t)
			}
			r := vramprof(t, execOpts{}, "report", tc.input(t), "--format", "snapshot")
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			data := []byte(r.stdout)
			require.True(t, bytes.HasPrefix(data, []byte{0x80, 2}), "a protocol 2 pickle")
			checkMemoryViz(t, data)
			if tc.check != nil {
				tc.check(t, data, r.stderr)
			}
		})
	}
}

// An attach mid-run, by hand: segment old was allocated before the trace
// began (its cudaMalloc never seen), and the allocator keeps handing out
// blocks inside it; then a traced segment with blocks, and a traced
// segment allocated, used and freed.
const (
	untracedSeg = 0x7f0000000000 // 16 MiB, never traced
	tracedSeg   = 0x7f1000000000 // 20 MiB, live at the end
	freedSeg    = 0x7f2000000000 // 2 MiB, freed in the trace
)

func writeUntracedSegmentTrace(t *testing.T) string {
	const pid = 4242
	seg := func(tm uint64, kind event.Kind, addr, size uint64) *event.Event {
		return &event.Event{Time: tm, PID: pid, TID: pid, Addr: addr, Size: size, Kind: kind,
			Layer: event.LayerSegment, API: map[event.Kind]event.API{event.KindAlloc: event.APICudaMalloc, event.KindFree: event.APICudaFree}[kind]}
	}
	block := func(tm uint64, kind event.Kind, addr, size uint64) *event.Event {
		return &event.Event{Time: tm, PID: pid, TID: pid, Addr: addr, Size: size, Kind: kind,
			Layer: event.LayerBlock, API: map[event.Kind]event.API{event.KindAlloc: event.APIPyTorchMalloc, event.KindFree: event.APIPyTorchFree}[kind]}
	}
	const ms = 1_000_000
	recs := []event.Record{
		&event.Process{PID: pid, Command: []string{"python", "train.py"}, Time: 1 * ms},
		block(2*ms, event.KindAlloc, untracedSeg, mib),
		block(3*ms, event.KindAlloc, untracedSeg+mib, 2*mib),
		block(4*ms, event.KindFree, untracedSeg, 0),
		seg(5*ms, event.KindAlloc, tracedSeg, 20*mib),
		block(6*ms, event.KindAlloc, tracedSeg, 4*mib),
		block(7*ms, event.KindAlloc, tracedSeg+4*mib, mib),
		block(8*ms, event.KindFree, tracedSeg, 0),
		block(9*ms, event.KindFree, untracedSeg+mib, 0),
		block(10*ms, event.KindAlloc, untracedSeg, mib/2), // live at the end, in no traced segment
		block(11*ms, event.KindAlloc, tracedSeg, 2*mib),
		seg(12*ms, event.KindAlloc, freedSeg, 2*mib),
		block(13*ms, event.KindAlloc, freedSeg, mib),
		block(14*ms, event.KindFree, freedSeg, 0),
		seg(15*ms, event.KindFree, freedSeg, 0),
		&event.End{Time: 16 * ms, Reason: "duration"},
	}
	path := filepath.Join(t.TempDir(), "trace.vpt")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w, err := event.NewWriter(f, &event.Header{Version: event.Version, Tool: "vramprof test", Mode: "attach", PID: pid, Command: []string{"python", "train.py"}})
	require.NoError(t, err)
	for _, r := range recs {
		require.NoError(t, w.Write(r))
	}
	require.NoError(t, w.Close())
	return path
}

// checkUntracedSegment: nothing of the untraced segment is exported; the
// traced segments are, with their blocks.
func checkUntracedSegment(t *testing.T, data []byte, stderr string) {
	assert.Contains(t, stderr, "leaves out 3 block allocations of pid 4242", "the blocks at 2, 3 and 10 ms")
	s, err := pysnapshot.Decode(bytes.NewReader(data))
	require.NoError(t, err)
	require.Len(t, s.DeviceTraces, 1)
	type act struct {
		action     string
		addr, size uint64
	}
	var got []act
	for _, e := range s.DeviceTraces[0] {
		got = append(got, act{e.Action, e.Addr, e.Size})
	}
	assert.Equal(t, []act{
		{"segment_alloc", tracedSeg, 20 * mib},
		{"alloc", tracedSeg, 4 * mib},
		{"alloc", tracedSeg + 4*mib, mib},
		{"free_requested", tracedSeg, 4 * mib}, {"free_completed", tracedSeg, 4 * mib},
		{"alloc", tracedSeg, 2 * mib},
		{"segment_alloc", freedSeg, 2 * mib},
		{"alloc", freedSeg, mib},
		{"free_requested", freedSeg, mib}, {"free_completed", freedSeg, mib},
		{"segment_free", freedSeg, 2 * mib},
	}, got, "the trace: the traced segments' entries only")
	require.Len(t, s.Segments, 1)
	g := s.Segments[0]
	assert.Equal(t, [2]uint64{tracedSeg, 20 * mib}, [2]uint64{g.Address, g.TotalSize})
	type blk struct {
		addr, size uint64
		state      string
	}
	var blocks []blk
	for _, b := range g.Blocks {
		blocks = append(blocks, blk{b.Address, b.Size, b.State})
	}
	assert.Equal(t, []blk{
		{tracedSeg, 2 * mib, pysnapshot.StateActiveAllocated},
		{tracedSeg + 2*mib, 2 * mib, pysnapshot.StateInactive},
		{tracedSeg + 4*mib, mib, pysnapshot.StateActiveAllocated},
		{tracedSeg + 5*mib, 15 * mib, pysnapshot.StateInactive},
	}, blocks, "the traced segment's blocks at the end")
}
