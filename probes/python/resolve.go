package python

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/vramprof/vramprof/probes/event"
)

// Bounds on what the Resolver believes of a code object. Real values are
// far below them; a pointer to something else fails them quickly rather
// than making the Resolver read megabytes.
const (
	maxStringLen = 4096    // code points in co_name, co_qualname, co_filename
	maxTableLen  = 1 << 20 // bytes of co_linetable
	maxCodeUnits = 1 << 24 // bytecode length, in 2-byte code units
	maxCache     = 1 << 16 // code objects remembered before the cache starts over
)

// instrMask keeps the instruction value of the walker's instruction word;
// the top 8 bits hold the owner byte (see Layout.Boundary).
const instrMask = 1<<56 - 1

// stackRefTagBits are the low bits of a 3.14 _PyStackRef that are tags,
// not pointer (Py_TAG_BITS; objects are at least 8-byte aligned).
const stackRefTagBits = 7

// Resolver turns the raw frames the walker records into source frames for
// one process. It reads the process's memory (/proc/PID/mem) lazily, once
// per code object, and remembers the result (up to maxCache code objects,
// then it starts over). It assumes that a code object's address is not
// reused for another code object while the process is traced; CPython
// frees code objects only when their functions die, which long-lived
// allocation sites rarely do. Must be Closed. Safe for concurrent use.
type Resolver struct {
	mu     sync.Mutex // guards everything below
	pid    int
	in     *Interpreter
	mem    *os.File
	memErr error
	opened bool
	cache  map[uint64]*codeInfo // nil value: not a code object
	// parent resolves, for a forked child whose memory is gone (it exited
	// before its stacks were read), the code objects it inherited: at the
	// fork the child's memory was a copy of the parent's, so a code object
	// the child ran from then lies at the same address in the parent.
	parent *Resolver
}

// codeInfo is what the Resolver keeps of a code object.
type codeInfo struct {
	function, file string
	firstLine      int
	table          []byte // co_linetable
	codeBytes      int    // length of the bytecode, in bytes
}

// NewResolver returns a Resolver for the process pid, in which Find found
// in. It opens nothing yet.
func NewResolver(pid int, in *Interpreter) *Resolver {
	return &Resolver{pid: pid, in: in, cache: map[uint64]*codeInfo{}}
}

// Fork returns a Resolver for a child that pid forked (see
// Resolver.parent). The child's own memory is read first, always; the
// parent's only once the child's cannot be read at all.
func (r *Resolver) Fork(child int) *Resolver {
	c := NewResolver(child, r.in)
	c.parent = r
	return c
}

// Close releases the process's memory file.
func (r *Resolver) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return nil
	}
	err := r.mem.Close()
	r.mem = nil
	return err
}

// Frame returns the source frame of a raw frame: code is the frame's code
// object pointer (f_code, f_executable; tag bits of a 3.14 _PyStackRef are
// masked here too), instr the walker's instruction word. Function is
// co_qualname (3.11+) or co_name (3.10), File co_filename, Line the line of
// the instruction (0 when the instruction lies outside the code object or
// has no line), Addr the code object's address. ok=false means the code
// object could not be read or is not one: then f is a placeholder whose
// Function is "<python code 0x...>", never a wrong name.
func (r *Resolver) Frame(code, instr uint64) (f event.Frame, ok bool) {
	code = r.untag(code)
	r.mu.Lock()
	ci := r.code(code)
	r.mu.Unlock()
	if ci == nil {
		return event.Frame{Addr: code, Function: fmt.Sprintf("<python code %#x>", code)}, false
	}
	f = event.Frame{Addr: code, Function: ci.function, File: ci.file}
	if line := r.line(ci, code, instr&instrMask); line > 0 {
		f.Line = int64(line)
	}
	return f, true
}

// Prefetch reads the code objects at the addresses given (as Frame takes
// them) into the cache now, while the process lives, so that a later
// Frame needs no read.
func (r *Resolver) Prefetch(codes []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range codes {
		if c != 0 {
			r.code(r.untag(c))
		}
	}
}

// untag masks a 3.14 _PyStackRef's tag bits off a code object pointer.
func (r *Resolver) untag(code uint64) uint64 {
	if r.in.Version.AtLeast(3, 14) {
		code &^= stackRefTagBits
	}
	return code
}

// line computes the line as PyFrame_GetLineNumber does for the version:
// 3.10: PyCode_Addr2Line(f_code, f_lasti * 2), f_lasti counting code
// units; 3.11+: PyCode_Addr2Line(code, _PyInterpreterFrame_LASTI(frame) *
// 2), where LASTI is (prev_instr or instr_ptr) - _PyCode_CODE(code) in code
// units and _PyCode_CODE is the code object's co_code_adaptive. 3.11/3.12
// store the last instruction started (one before the first, LASTI -1, on
// entry), 3.13+ the one executing or about to begin; CPython applies the
// same formula to both, and so does this.
func (r *Resolver) line(ci *codeInfo, code, raw uint64) int {
	var lasti int64
	l := &r.in.Layout
	if l.CodeAdaptive < 0 {
		lasti = int64(int32(uint32(raw))) // f_lasti is a C int
	} else {
		lasti = int64(raw-(code+uint64(l.CodeAdaptive))) / 2
	}
	// -1 is "before the first instruction": co_firstlineno. Anything else
	// outside the bytecode is not a real frame's value.
	if lasti < -1 || lasti*2 >= int64(ci.codeBytes) {
		return noLine
	}
	if l.CodeAdaptive < 0 {
		return addr2Line310(ci.table, ci.firstLine, int(lasti)*2)
	}
	return addr2Line311(ci.table, ci.firstLine, int(lasti)*2)
}

// code returns the code object at addr, nil when it is not one.
func (r *Resolver) code(addr uint64) *codeInfo {
	if ci, ok := r.cache[addr]; ok {
		return ci
	}
	ci, err := r.readCode(addr)
	if err != nil {
		ci = nil
		if r.parent != nil {
			// The child's memory gone (its runtime state unreadable): the
			// code object it inherited, from the parent. A code object
			// the child made itself after the fork is not in the parent
			// at that address, and fails the parent's checks, or names a
			// code object the parent made there: a wrong name possible
			// only for a child gone before its stacks were read.
			if _, gone := r.read(r.in.RuntimeAddr, 8); gone != nil {
				r.parent.mu.Lock()
				ci = r.parent.code(addr)
				r.parent.mu.Unlock()
			}
		}
	}
	if len(r.cache) >= maxCache {
		clear(r.cache)
	}
	r.cache[addr] = ci
	return ci
}

// readCode reads and checks a code object.
func (r *Resolver) readCode(addr uint64) (*codeInfo, error) {
	l := &r.in.Layout
	if addr == 0 || addr%8 != 0 {
		return nil, fmt.Errorf("code object address %#x", addr)
	}
	span := max(l.ObjectType, l.VarObjectSize, l.CodeName, l.CodeQualname, l.CodeFilename,
		l.CodeFirstLineno, l.CodeLinetable, l.CodeCode) + 8
	hdr, err := r.read(addr, int(span))
	if err != nil {
		return nil, err
	}
	u64 := func(off int64) uint64 { return binary.LittleEndian.Uint64(hdr[off:]) }
	if u64(l.ObjectType) != r.in.CodeType {
		return nil, fmt.Errorf("%#x is not a code object", addr)
	}
	ci := &codeInfo{firstLine: int(int32(binary.LittleEndian.Uint32(hdr[l.CodeFirstLineno:])))}
	nameOff := l.CodeQualname
	if nameOff < 0 {
		nameOff = l.CodeName
	}
	if ci.function, err = r.readString(u64(nameOff)); err != nil {
		return nil, fmt.Errorf("name of code object %#x: %w", addr, err)
	}
	if ci.file, err = r.readString(u64(l.CodeFilename)); err != nil {
		return nil, fmt.Errorf("filename of code object %#x: %w", addr, err)
	}
	if ci.table, err = r.readBytes(u64(l.CodeLinetable), maxTableLen, true); err != nil {
		return nil, fmt.Errorf("line table of code object %#x: %w", addr, err)
	}
	if l.CodeCode >= 0 {
		// 3.10: the bytecode is a bytes object; only its length matters.
		b, err := r.readBytes(u64(l.CodeCode), 2*maxCodeUnits, false)
		if err != nil {
			return nil, fmt.Errorf("bytecode of code object %#x: %w", addr, err)
		}
		ci.codeBytes = len(b)
	} else {
		// 3.11+: a variable-size object whose ob_size counts code units.
		n := u64(l.VarObjectSize)
		if n > maxCodeUnits {
			return nil, fmt.Errorf("code object %#x: %d code units", addr, n)
		}
		ci.codeBytes = int(n) * 2
	}
	return ci, nil
}

// readBytes reads a bytes object, checking its type and length; with
// data false it returns a slice of the right length but unread contents.
func (r *Resolver) readBytes(addr uint64, maxLen int, data bool) ([]byte, error) {
	l := &r.in.Layout
	hdr, err := r.read(addr, int(l.BytesData))
	if err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint64(hdr[l.ObjectType:]) != r.in.BytesType {
		return nil, fmt.Errorf("%#x is not a bytes object", addr)
	}
	n := binary.LittleEndian.Uint64(hdr[l.BytesSize:])
	if n > uint64(maxLen) {
		return nil, fmt.Errorf("bytes object %#x: length %d", addr, n)
	}
	if !data {
		return make([]byte, n), nil
	}
	return r.read(addr+uint64(l.BytesData), int(n))
}

// Unicode object state bits (PyASCIIObject.state, Include/cpython/
// unicodeobject.h, the same from 3.10 to 3.14 in GIL builds): interned:2,
// kind:3, compact:1, ascii:1.
const (
	stateKindShift = 2
	stateKindMask  = 7
	stateCompact   = 1 << 5
	stateASCII     = 1 << 6
)

// readString reads a str object: a compact one (the only kind code
// objects hold: names are interned, file names made by the compiler), its
// characters right after the header: 1 byte each (Latin-1) when kind is
// 1, 2 (UCS-2) or 4 (UCS-4) bytes otherwise. Returns UTF-8.
func (r *Resolver) readString(addr uint64) (string, error) {
	l := &r.in.Layout
	hdr, err := r.read(addr, int(l.UnicodeState+4))
	if err != nil {
		return "", err
	}
	if binary.LittleEndian.Uint64(hdr[l.ObjectType:]) != r.in.UnicodeType {
		return "", fmt.Errorf("%#x is not a str object", addr)
	}
	n := binary.LittleEndian.Uint64(hdr[l.UnicodeLength:])
	state := binary.LittleEndian.Uint32(hdr[l.UnicodeState:])
	kind := int(state >> stateKindShift & stateKindMask)
	ascii := state&stateASCII != 0
	switch {
	case n > maxStringLen:
		return "", fmt.Errorf("str object %#x: length %d", addr, n)
	case state&stateCompact == 0:
		return "", fmt.Errorf("str object %#x: not compact", addr)
	case kind != 1 && kind != 2 && kind != 4, ascii && kind != 1:
		return "", fmt.Errorf("str object %#x: kind %d", addr, kind)
	}
	dataOff := l.UnicodeCompactData
	if ascii {
		dataOff = l.UnicodeASCIIData
	}
	b, err := r.read(addr+uint64(dataOff), int(n)*kind)
	if err != nil {
		return "", err
	}
	if ascii {
		return string(b), nil
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i += kind {
		var c rune
		switch kind {
		case 1:
			c = rune(b[i])
		case 2:
			c = rune(binary.LittleEndian.Uint16(b[i:]))
		case 4:
			c = rune(binary.LittleEndian.Uint32(b[i:]))
		}
		if !utf8.ValidRune(c) {
			return "", fmt.Errorf("str object %#x: code point %#x", addr, c)
		}
		out = utf8.AppendRune(out, c)
	}
	return string(out), nil
}

// read reads n bytes of the process's memory at addr.
func (r *Resolver) read(addr uint64, n int) ([]byte, error) {
	if !r.opened {
		r.opened = true
		r.mem, r.memErr = os.Open("/proc/" + strconv.Itoa(r.pid) + "/mem")
	}
	if r.memErr != nil {
		return nil, r.memErr
	}
	if addr > 1<<63-1-uint64(n) {
		return nil, fmt.Errorf("address %#x", addr)
	}
	b := make([]byte, n)
	if _, err := r.mem.ReadAt(b, int64(addr)); err != nil {
		return nil, fmt.Errorf("read %d bytes at %#x: %w", n, addr, err)
	}
	return b, nil
}
