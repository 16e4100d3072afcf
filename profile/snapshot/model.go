package snapshot

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"weak"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"
)

// Snapshot is a PyTorch memory snapshot, decoded. Fields not listed are
// dropped on import (allocator_settings, compile_context, user_metadata).
type Snapshot struct {
	// Segments are the allocator's segments at the time of the snapshot.
	Segments []Segment
	// DeviceTraces has one list of trace entries per device index, oldest
	// first. Nil for the older generation, which has no traces.
	DeviceTraces [][]TraceEntry
}

// Segment is one cudaMalloc'd (or, expandable, mapped) region and the
// blocks that tile it.
type Segment struct {
	Device        int32
	Address       uint64
	TotalSize     uint64
	AllocatedSize uint64
	ActiveSize    uint64
	RequestedSize uint64
	Stream        uint64
	SegmentType   string // "small" or "large"
	IsExpandable  bool
	Frames        []Frame // where the segment was allocated; may be empty
	Blocks        []Block
}

// Block states.
const (
	StateActiveAllocated   = "active_allocated"    // handed out, in use
	StateActivePendingFree = "active_pending_free" // freed by the program, awaiting its streams
	StateInactive          = "inactive"            // cached free space
)

// Block is a range of a segment.
type Block struct {
	Address       uint64
	Size          uint64
	RequestedSize uint64
	State         string
	Frames        []Frame
	// History is the older generation's record of the allocations made in
	// this block, the last being the current one.
	History []HistoryEntry
}

// Live reports whether the block holds an allocation the program has not
// yet seen completed as freed.
func (b *Block) Live() bool {
	return b.State == StateActiveAllocated || b.State == StateActivePendingFree
}

// HistoryEntry is one allocation in an older-generation block's history.
type HistoryEntry struct {
	Addr     uint64
	RealSize uint64
	Frames   []Frame
}

// Trace actions (TraceEntry.Action).
const (
	ActionAlloc         = "alloc"
	ActionFreeRequested = "free_requested"
	ActionFreeCompleted = "free_completed"
	ActionSegmentAlloc  = "segment_alloc"
	ActionSegmentFree   = "segment_free"
	ActionSegmentMap    = "segment_map"
	ActionSegmentUnmap  = "segment_unmap"
	ActionSnapshot      = "snapshot"
	ActionOOM           = "oom"
	ActionEmptyCache    = "empty_cache"
)

// TraceEntry is one allocator action.
type TraceEntry struct {
	Action string
	Addr   uint64 // absent for "oom"
	Size   uint64
	Stream uint64
	// TimeUS is the entry's time in microseconds; HasTime is false for
	// snapshots that predate the field.
	TimeUS  int64
	HasTime bool
	// DeviceFree is the device's free memory at an "oom".
	DeviceFree uint64
	Frames     []Frame
}

// Frame is one Python or C++ frame, as PyTorch's CapturedTraceback gives it.
type Frame struct {
	Filename string
	Line     int64
	Name     string
}

// Decode reads one snapshot pickle. It reads r to the end (snapshots are
// decoded whole), refuses pickles that refer to Python code (ErrUnsafe) and
// never executes anything.
func Decode(r io.Reader) (*Snapshot, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	sim, err := scan(data)
	if err != nil {
		return nil, err
	}
	sizes, memoLen := sim.sizes, min(sim.memo, uint64(len(data)))
	sim = nil // the rest of it is garbage now
	if v, err := fastLoad(data, sizes, int(memoLen)); err == nil {
		return fromValue(v)
	}
	u := pickle.NewUnpickler(bufio.NewReader(bytes.NewReader(data)))
	u.FindClass = refuseClass
	v, err := load(&u)
	if err != nil {
		if errors.Is(err, ErrUnsafe) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return fromValue(v)
}

// load runs the unpickler, turning its panics on inconsistent input (an odd
// number of SETITEMS operands, a stack underflow it does not check) into
// ErrMalformed.
func load(u *pickle.Unpickler) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("%w: %v", ErrMalformed, r)
		}
	}()
	return u.Load()
}

// refuseClass is the unpickler's class resolver: a snapshot names no class.
func refuseClass(module, name string) (any, error) {
	return nil, fmt.Errorf("%w: class %s.%s", ErrUnsafe, module, name)
}

// path names where a value sits, for error messages
// ("snapshot.segments[3].blocks[5]"). It is a value, spelled out only for
// an error: built as a string for every block and entry, paths were most
// of the conversion's garbage, several times the file's size.
type path struct {
	parts [12]pathPart
	n     int
	more  bool // deeper than parts: the rest is left out
}

// pathPart is a dict key, or a list index when key is "".
type pathPart struct {
	key string
	idx int
}

// rootPath is the snapshot's path.
var rootPath = path{}.key("snapshot")

func (p path) key(k string) path { return p.add(pathPart{key: k}) }
func (p path) idx(i int) path    { return p.add(pathPart{idx: i}) }

func (p path) add(part pathPart) path {
	if p.n == len(p.parts) {
		p.more = true
		return p
	}
	p.parts[p.n] = part
	p.n++
	return p
}

func (p path) String() string {
	var b strings.Builder
	for i, part := range p.parts[:p.n] {
		switch {
		case part.key == "":
			fmt.Fprintf(&b, "[%d]", part.idx)
		case i > 0:
			b.WriteString("." + part.key)
		default:
			b.WriteString(part.key)
		}
	}
	if p.more {
		b.WriteString("...")
	}
	return b.String()
}

func malformed(p path, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrMalformed, p.String(), fmt.Sprintf(format, args...))
}

// dict is a decoded Python dict keyed by strings. A snapshot's dicts have
// a handful of keys: a linear search beats building a map for each.
type dict struct {
	p       path
	entries []types.DictEntry
}

func asDict(p path, v any) (dict, error) {
	d, ok := v.(*types.Dict)
	if !ok {
		return dict{}, malformed(p, "want a dict, got %T", v)
	}
	for _, e := range *d {
		if _, ok := e.Key.(string); !ok {
			return dict{}, malformed(p, "dict key %v is not a string", e.Key)
		}
	}
	return dict{p, *d}, nil
}

// val returns the value at k (the last one, as Python keeps), nil when
// absent.
func (d dict) val(k string) any {
	v, _ := d.lookup(k)
	return v
}

func (d dict) lookup(k string) (any, bool) {
	for i := len(d.entries) - 1; i >= 0; i-- {
		if d.entries[i].Key.(string) == k {
			return d.entries[i].Value, true
		}
	}
	return nil, false
}

func asList(p path, v any) ([]any, error) {
	switch l := v.(type) {
	case *types.List:
		return *l, nil
	case *types.Tuple:
		return *l, nil
	case nil:
		return nil, nil
	}
	return nil, malformed(p, "want a list, got %T", v)
}

// int64Of converts a Python int.
func int64Of(p path, v any) (int64, error) {
	switch n := v.(type) {
	case int:
		return int64(n), nil
	case bool:
		if n {
			return 1, nil
		}
		return 0, nil
	case *big.Int:
		if n.IsInt64() {
			return n.Int64(), nil
		}
		if n.IsUint64() {
			return int64(n.Uint64()), nil // an address or stream over 2^63: keep its bits
		}
	case nil:
		return 0, nil
	}
	return 0, malformed(p, "want an int, got %v (%T)", v, v)
}

func (d dict) int(k string) (int64, error) {
	v := d.val(k)
	if n, ok := v.(int); ok {
		return int64(n), nil
	}
	return int64Of(d.p.key(k), v)
}

func (d dict) uint(k string) (uint64, error) {
	v, err := d.int(k)
	return uint64(v), err
}

func (d dict) str(k string) (string, error) {
	v := d.val(k)
	switch s := v.(type) {
	case string:
		return s, nil
	case nil:
		return "", nil
	}
	return "", malformed(d.p.key(k), "want a string, got %T", v)
}

func (d dict) bool(k string) (bool, error) {
	v := d.val(k)
	switch b := v.(type) {
	case bool:
		return b, nil
	case nil:
		return false, nil
	}
	return false, malformed(d.p.key(k), "want a bool, got %T", v)
}

func (d dict) has(k string) bool {
	_, ok := d.lookup(k)
	return ok
}

// errs collects the first error of a run of field reads.
type errs struct{ err error }

func (e *errs) u(v uint64, err error) uint64 {
	if e.err == nil {
		e.err = err
	}
	return v
}

func (e *errs) i(v int64, err error) int64 {
	if e.err == nil {
		e.err = err
	}
	return v
}

func (e *errs) s(v string, err error) string {
	if e.err == nil {
		e.err = err
	}
	return v
}

func (e *errs) b(v bool, err error) bool {
	if e.err == nil {
		e.err = err
	}
	return v
}

func fromValue(v any) (*Snapshot, error) {
	top, err := asDict(rootPath, v)
	if err != nil {
		return nil, err
	}
	if !top.has("segments") {
		return nil, malformed(rootPath, "no \"segments\": not a torch.cuda.memory snapshot")
	}
	s := &Snapshot{}
	fc := newFrameCache()
	segs, err := asList(top.p.key("segments"), top.val("segments"))
	if err != nil {
		return nil, err
	}
	s.Segments = make([]Segment, 0, len(segs)) // grown by append, a long list leaves 4 times itself in garbage
	for i, sv := range segs {
		seg, err := segmentOf(fc, top.p.key("segments").idx(i), sv)
		if err != nil {
			return nil, err
		}
		s.Segments = append(s.Segments, seg)
	}
	if top.has("device_traces") {
		tp := top.p.key("device_traces")
		devs, err := asList(tp, top.val("device_traces"))
		if err != nil {
			return nil, err
		}
		s.DeviceTraces = make([][]TraceEntry, len(devs))
		for d, dv := range devs {
			entries, err := asList(tp.idx(d), dv)
			if err != nil {
				return nil, err
			}
			s.DeviceTraces[d] = make([]TraceEntry, 0, len(entries))
			for i, ev := range entries {
				te, err := traceEntryOf(fc, tp.idx(d).idx(i), ev)
				if err != nil {
					return nil, err
				}
				s.DeviceTraces[d] = append(s.DeviceTraces[d], te)
				// The unpickled entry is garbage now: the graph is freed as
				// it is converted, not held to the end.
				entries[i] = nil
			}
		}
	}
	return s, nil
}

func segmentOf(fc *frameCache, p path, v any) (Segment, error) {
	d, err := fc.onceDict(p, v)
	if err != nil {
		return Segment{}, err
	}
	var e errs
	seg := Segment{
		Device:        int32(e.i(d.int("device"))),
		Address:       e.u(d.uint("address")),
		TotalSize:     e.u(d.uint("total_size")),
		AllocatedSize: e.u(d.uint("allocated_size")),
		ActiveSize:    e.u(d.uint("active_size")),
		RequestedSize: e.u(d.uint("requested_size")),
		Stream:        e.u(d.uint("stream")),
		SegmentType:   e.s(d.str("segment_type")),
		IsExpandable:  e.b(d.bool("is_expandable")),
	}
	if e.err != nil {
		return Segment{}, e.err
	}
	if seg.Frames, err = fc.framesOf(p, d.val("frames")); err != nil {
		return Segment{}, err
	}
	blocks, err := asList(p.key("blocks"), d.val("blocks"))
	if err != nil {
		return Segment{}, err
	}
	addr := seg.Address
	if len(blocks) > 0 {
		seg.Blocks = make([]Block, 0, len(blocks))
	}
	for i, bv := range blocks {
		bp := p.key("blocks").idx(i)
		bd, err := fc.onceDict(bp, bv)
		if err != nil {
			return Segment{}, err
		}
		b := Block{
			Address:       addr, // blocks tile the segment; older snapshots carry no address
			Size:          e.u(bd.uint("size")),
			RequestedSize: e.u(bd.uint("requested_size")),
			State:         e.s(bd.str("state")),
		}
		if bd.has("address") {
			b.Address = e.u(bd.uint("address"))
		}
		if e.err != nil {
			return Segment{}, e.err
		}
		if b.Frames, err = fc.framesOf(bp, bd.val("frames")); err != nil {
			return Segment{}, err
		}
		hist, err := asList(bp.key("history"), bd.val("history"))
		if err != nil {
			return Segment{}, err
		}
		if len(hist) > 0 {
			b.History = make([]HistoryEntry, 0, len(hist))
		}
		for j, hv := range hist {
			hp := bp.key("history").idx(j)
			hd, err := fc.onceDict(hp, hv)
			if err != nil {
				return Segment{}, err
			}
			h := HistoryEntry{Addr: e.u(hd.uint("addr")), RealSize: e.u(hd.uint("real_size"))}
			if e.err != nil {
				return Segment{}, e.err
			}
			if h.Frames, err = fc.framesOf(hp, hd.val("frames")); err != nil {
				return Segment{}, err
			}
			b.History = append(b.History, h)
		}
		seg.Blocks = append(seg.Blocks, b)
		addr = b.Address + b.Size
	}
	return seg, nil
}

func traceEntryOf(fc *frameCache, p path, v any) (TraceEntry, error) {
	d, err := fc.onceDict(p, v)
	if err != nil {
		return TraceEntry{}, err
	}
	var e errs
	te := TraceEntry{
		Action:     e.s(d.str("action")),
		Addr:       e.u(d.uint("addr")),
		Size:       e.u(d.uint("size")),
		Stream:     e.u(d.uint("stream")),
		TimeUS:     e.i(d.int("time_us")),
		HasTime:    d.has("time_us"),
		DeviceFree: e.u(d.uint("device_free")),
	}
	if e.err != nil {
		return TraceEntry{}, e.err
	}
	te.Frames, err = fc.framesOf(p, d.val("frames"))
	return te, err
}

// frameCache shares decoded frames: PyTorch's snapshots share frame dicts
// between tracebacks and a traceback between the entries of one block, so
// a traceback decoded once per entry would take many times the file's
// size. Lists are found by identity (a memoized list decodes to one
// *types.List; a weak key, so that a list converted and dropped can be
// freed, and a dead key never matches a new list), then by content: equal tracebacks share one []Frame, which
// Records' stack interning finds by identity in turn.
type frameCache struct {
	lists   map[weak.Pointer[types.List]][]Frame // weak: an entry's list may be freed once converted
	ids     map[Frame]uint32
	content map[string][]Frame
	key     []byte
}

// consumedKey marks a dict onceDict has converted: its only key.
type consumedKey struct{}

// consumed is what a dict converted by onceDict holds afterwards.
var consumed = types.Dict{{Key: consumedKey{}}}

// onceDict is asDict for a dict that becomes a Segment, Block,
// HistoryEntry or TraceEntry. PyTorch never shares one between two places;
// a pickle that does (a reference to one segment of a thousand blocks,
// repeated: five bytes each) would make the conversion take thousands of
// times the file's size, so a second use is refused. The dict is emptied
// as it is taken (its entries stay with the dict returned): what it
// referred to can be freed once converted.
func (fc *frameCache) onceDict(p path, v any) (dict, error) {
	dp, ok := v.(*types.Dict)
	if ok && len(*dp) == 1 && (*dp)[0].Key == any(consumedKey{}) {
		return dict{}, malformed(p, "the same dict as an earlier segment, block or trace entry (a snapshot shares none)")
	}
	d, err := asDict(p, v)
	if err != nil {
		return dict{}, err
	}
	*dp = consumed
	return d, nil
}

func newFrameCache() *frameCache {
	return &frameCache{lists: map[weak.Pointer[types.List]][]Frame{}, ids: map[Frame]uint32{}, content: map[string][]Frame{}}
}

// framesOf decodes the "frames" value of the dict at p.
func (fc *frameCache) framesOf(p path, v any) ([]Frame, error) {
	lp, _ := v.(*types.List)
	if lp != nil {
		if fs, ok := fc.lists[weak.Make(lp)]; ok {
			return fs, nil
		}
	}
	p = p.key("frames")
	l, err := asList(p, v)
	if err != nil || len(l) == 0 {
		return nil, err
	}
	out := make([]Frame, 0, len(l))
	fc.key = fc.key[:0]
	for i, fv := range l {
		// The frame's path is built only for an error message: decoding
		// again with it gives the message its place.
		f, err := frameOf(p, fv)
		if err != nil {
			_, err = frameOf(p.idx(i), fv)
			return nil, err
		}
		id, ok := fc.ids[f]
		if !ok {
			id = uint32(len(fc.ids))
			fc.ids[f] = id
		}
		fc.key = binary.LittleEndian.AppendUint32(fc.key, id)
		out = append(out, f)
	}
	if fs, ok := fc.content[string(fc.key)]; ok {
		out = fs
	} else {
		fc.content[string(fc.key)] = out
	}
	if lp != nil {
		fc.lists[weak.Make(lp)] = out
	}
	return out, nil
}

func frameOf(p path, v any) (Frame, error) {
	d, err := asDict(p, v)
	if err != nil {
		return Frame{}, err
	}
	var e errs
	f := Frame{Filename: e.s(d.str("filename")), Line: e.i(d.int("line")), Name: e.s(d.str("name"))}
	return f, e.err
}
