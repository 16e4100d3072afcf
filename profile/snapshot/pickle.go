package snapshot

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrUnsafe means the pickle names or calls a Python object. A memory
	// snapshot holds only plain values, so such a pickle is not one, and
	// unpickling it in Python could run arbitrary code.
	ErrUnsafe = errors.New("pickle refers to Python code")
	// ErrMalformed means the input is not a well-formed pickle, or not a
	// memory snapshot's structure.
	ErrMalformed = errors.New("malformed snapshot pickle")
)

// Pickle opcodes (CPython's Lib/pickle.py), grouped by how their argument is
// laid out, so that scan can step over every one without interpreting it.
const (
	opProto          = 0x80
	opFrame          = 0x95
	opStop           = '.'
	opMark           = '('
	opEmptyDict      = '}'
	opEmptyList      = ']'
	opSetItems       = 'u'
	opAppends        = 'e'
	opBinUnicode     = 'X'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opBinInt2        = 'M'
	opLong1          = 0x8a
	opNewTrue        = 0x88
	opNewFalse       = 0x89
	opNone           = 'N'
	opTuple2         = 0x86
	opGlobal         = 'c'
	opInst           = 'i'
	opStackGlobal    = 0x93
	opShortBinString = 'U'
)

// argLayout says how many bytes follow an opcode.
type argLayout uint8

const (
	argNone    argLayout = iota
	argFixed             // n bytes
	argLen1              // 1-byte length, then that many bytes
	argLen4              // 4-byte little-endian length, then that many bytes
	argLen8              // 8-byte little-endian length, then that many bytes
	argLine              // one newline-terminated line
	argTwoLine           // two lines (GLOBAL, INST)
)

type opInfo struct {
	layout argLayout
	n      int  // argFixed: the byte count
	unsafe bool // names or calls a Python object
	name   string
}

// opcodes lists every opcode of protocols 0-5. Anything else is malformed.
var opcodes = map[byte]opInfo{
	'(': {name: "MARK"}, '.': {name: "STOP"}, '0': {name: "POP"}, '1': {name: "POP_MARK"},
	'2': {name: "DUP"}, 'N': {name: "NONE"}, 'a': {name: "APPEND"}, 'd': {name: "DICT"},
	'}': {name: "EMPTY_DICT"}, 'e': {name: "APPENDS"}, 'l': {name: "LIST"}, ']': {name: "EMPTY_LIST"},
	's': {name: "SETITEM"}, 't': {name: "TUPLE"}, ')': {name: "EMPTY_TUPLE"}, 'u': {name: "SETITEMS"},
	0x85: {name: "TUPLE1"}, 0x86: {name: "TUPLE2"}, 0x87: {name: "TUPLE3"},
	0x88: {name: "NEWTRUE"}, 0x89: {name: "NEWFALSE"}, 0x8f: {name: "EMPTY_SET"},
	0x90: {name: "ADDITEMS"}, 0x91: {name: "FROZENSET"}, 0x94: {name: "MEMOIZE"},

	'K': {layout: argFixed, n: 1, name: "BININT1"}, 'h': {layout: argFixed, n: 1, name: "BINGET"},
	'q': {layout: argFixed, n: 1, name: "BINPUT"}, 0x80: {layout: argFixed, n: 1, name: "PROTO"},
	'M': {layout: argFixed, n: 2, name: "BININT2"}, 'J': {layout: argFixed, n: 4, name: "BININT"},
	'j': {layout: argFixed, n: 4, name: "LONG_BINGET"}, 'r': {layout: argFixed, n: 4, name: "LONG_BINPUT"},
	'G': {layout: argFixed, n: 8, name: "BINFLOAT"}, 0x95: {layout: argFixed, n: 8, name: "FRAME"},

	'U': {layout: argLen1, name: "SHORT_BINSTRING"}, 'C': {layout: argLen1, name: "SHORT_BINBYTES"},
	0x8c: {layout: argLen1, name: "SHORT_BINUNICODE"}, 0x8a: {layout: argLen1, name: "LONG1"},
	'T': {layout: argLen4, name: "BINSTRING"}, 'X': {layout: argLen4, name: "BINUNICODE"},
	'B': {layout: argLen4, name: "BINBYTES"}, 0x8b: {layout: argLen4, name: "LONG4"},
	0x8d: {layout: argLen8, name: "BINUNICODE8"}, 0x8e: {layout: argLen8, name: "BINBYTES8"},
	0x96: {layout: argLen8, name: "BYTEARRAY8"},

	'I': {layout: argLine, name: "INT"}, 'L': {layout: argLine, name: "LONG"}, 'F': {layout: argLine, name: "FLOAT"},
	'S': {layout: argLine, name: "STRING"}, 'V': {layout: argLine, name: "UNICODE"},
	'g': {layout: argLine, name: "GET"}, 'p': {layout: argLine, name: "PUT"},

	// Opcodes that reach Python objects: refused.
	'c':  {layout: argTwoLine, unsafe: true, name: "GLOBAL"},
	'i':  {layout: argTwoLine, unsafe: true, name: "INST"},
	'P':  {layout: argLine, unsafe: true, name: "PERSID"},
	'Q':  {unsafe: true, name: "BINPERSID"},
	'R':  {unsafe: true, name: "REDUCE"},
	'b':  {unsafe: true, name: "BUILD"},
	'o':  {unsafe: true, name: "OBJ"},
	0x81: {unsafe: true, name: "NEWOBJ"},
	0x92: {unsafe: true, name: "NEWOBJ_EX"},
	0x93: {unsafe: true, name: "STACK_GLOBAL"},
	0x82: {layout: argFixed, n: 1, unsafe: true, name: "EXT1"},
	0x83: {layout: argFixed, n: 2, unsafe: true, name: "EXT2"},
	0x84: {layout: argFixed, n: 4, unsafe: true, name: "EXT4"},
	0x97: {unsafe: true, name: "NEXT_BUFFER"},
	0x98: {unsafe: true, name: "READONLY_BUFFER"},
}

// scan walks the opcode stream of one pickle without building anything. It
// refuses unsafe opcodes (ErrUnsafe) and any length or frame that reaches
// past the end of data (ErrMalformed): gopickle allocates a length before
// reading it, so a damaged length must never reach it. It follows the
// stack (stackSim), refusing what would take memory out of proportion, and
// returns its simulation: the containers' sizes for fastLoad.
func scan(data []byte) (*stackSim, error) {
	sim := &stackSim{size: len(data)}
	for off := 0; off < len(data); {
		at := off
		op := data[off]
		off++
		info, ok := opcodes[op]
		if !ok {
			return nil, fmt.Errorf("%w: unknown opcode 0x%02x at byte %d", ErrMalformed, op, at)
		}
		if info.unsafe {
			what := info.name
			if info.layout == argTwoLine {
				if mod, name, ok := twoLines(data[off:]); ok {
					what = fmt.Sprintf("%s %s.%s", info.name, mod, name)
				}
			}
			return nil, fmt.Errorf("%w: %s at byte %d; a memory snapshot holds only dicts, lists, strings and numbers, so this is not one (loading it in Python would run code)",
				ErrUnsafe, what, at)
		}
		rest := uint64(len(data) - off)
		var n uint64
		switch info.layout {
		case argNone:
		case argFixed:
			n = uint64(info.n)
			if op == opFrame && rest >= 8 {
				// The frame's contents are scanned as ordinary opcodes;
				// only its declared size must fit.
				if sz := binary.LittleEndian.Uint64(data[off:]); sz > rest-8 {
					return nil, fmt.Errorf("%w: frame of %d bytes at byte %d runs past the end (%d bytes left)", ErrMalformed, sz, at, rest-8)
				}
			}
		case argLen1, argLen4, argLen8:
			w := map[argLayout]uint64{argLen1: 1, argLen4: 4, argLen8: 8}[info.layout]
			if rest < w {
				return nil, fmt.Errorf("%w: %s at byte %d cut short", ErrMalformed, info.name, at)
			}
			var l uint64
			switch w {
			case 1:
				l = uint64(data[off])
			case 4:
				l = uint64(binary.LittleEndian.Uint32(data[off:]))
			default:
				l = binary.LittleEndian.Uint64(data[off:])
			}
			if l > rest-w {
				return nil, fmt.Errorf("%w: %s of %d bytes at byte %d runs past the end", ErrMalformed, info.name, l, at)
			}
			n = w + l
		case argLine, argTwoLine:
			lines := 1
			if info.layout == argTwoLine {
				lines = 2
			}
			for range lines {
				i := bytes.IndexByte(data[off+int(n):], '\n')
				if i < 0 {
					return nil, fmt.Errorf("%w: %s at byte %d has no end of line", ErrMalformed, info.name, at)
				}
				n += uint64(i) + 1
			}
		}
		if n > rest {
			return nil, fmt.Errorf("%w: %s at byte %d cut short", ErrMalformed, info.name, at)
		}
		if err := sim.step(op, at, data[off:off+int(n)]); err != nil {
			return nil, err
		}
		if err := sim.check(len(data)); err != nil {
			return nil, err
		}
		off += int(n)
		if op == opStop {
			return sim, nil
		}
	}
	return nil, fmt.Errorf("%w: no STOP opcode (the file is cut short)", ErrMalformed)
}

// twoLines returns GLOBAL's module and name, for the error message.
func twoLines(b []byte) (string, string, bool) {
	parts := strings.SplitN(string(b[:min(len(b), 512)]), "\n", 3)
	if len(parts) < 3 {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// encoder writes a protocol 2 pickle using only the opcodes MemoryViz.js's
// own unpickler reads: PROTO, EMPTY_DICT/EMPTY_LIST, MARK, SETITEMS/APPENDS,
// BINUNICODE, BININT1/BININT2/BININT/LONG1, NEWTRUE/NEWFALSE, NONE, TUPLE2,
// STOP. No memo: every value is written where it occurs, so the output is a
// function of the input alone.
type encoder struct {
	w   *bufio.Writer
	err error
}

// batch is how many items one MARK ... SETITEMS/APPENDS run carries, as
// CPython's pickler does, so that no reader's stack grows with the input.
const batch = 1000

func (e *encoder) bytes(b ...byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *encoder) str(s string) {
	if !utf8.ValidString(s) {
		// Python decodes BINUNICODE as UTF-8 and refuses invalid bytes:
		// a path with foreign bytes must not make the whole file unreadable.
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	var h [5]byte
	h[0] = opBinUnicode
	binary.LittleEndian.PutUint32(h[1:], uint32(len(s)))
	e.bytes(h[:]...)
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
	}
}

func (e *encoder) int(v int64) {
	switch {
	case v >= 0 && v <= math.MaxUint8:
		e.bytes(opBinInt1, byte(v))
	case v >= 0 && v <= math.MaxUint16:
		e.bytes(opBinInt2, byte(v), byte(v>>8))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		var b [5]byte
		b[0] = opBinInt
		binary.LittleEndian.PutUint32(b[1:], uint32(int32(v)))
		e.bytes(b[:]...)
	default:
		e.long(uint64(v), v < 0)
	}
}

// uint writes v, which may exceed int64 (a 64-bit address or stream).
func (e *encoder) uint(v uint64) {
	if v <= math.MaxInt64 {
		e.int(int64(v))
		return
	}
	e.long(v, false)
}

// long writes LONG1: a little-endian two's complement integer in as few
// bytes as keep its sign.
func (e *encoder) long(v uint64, negative bool) {
	var b [9]byte
	binary.LittleEndian.PutUint64(b[:8], v)
	n := 8
	if !negative {
		b[8] = 0
		n = 9
		for n > 1 && b[n-1] == 0 && b[n-2]&0x80 == 0 {
			n--
		}
	} else {
		for n > 1 && b[n-1] == 0xff && b[n-2]&0x80 != 0 {
			n--
		}
	}
	e.bytes(opLong1, byte(n))
	e.bytes(b[:n]...)
}

func (e *encoder) bool(v bool) {
	if v {
		e.bytes(opNewTrue)
	} else {
		e.bytes(opNewFalse)
	}
}

// dict writes a dict whose entries are written by the calls in kv, in
// order: each writes one key then its value.
func (e *encoder) dict(kv ...func()) {
	e.bytes(opEmptyDict)
	for i := 0; i < len(kv); i += batch {
		e.bytes(opMark)
		for _, f := range kv[i:min(i+batch, len(kv))] {
			f()
		}
		e.bytes(opSetItems)
	}
}

// list writes a list of n items, item(i) writing the i-th.
func (e *encoder) list(n int, item func(i int)) {
	e.bytes(opEmptyList)
	for i := 0; i < n; i += batch {
		e.bytes(opMark)
		for j := i; j < min(i+batch, n); j++ {
			item(j)
		}
		e.bytes(opAppends)
	}
}

// Helpers for dict entries.
func (e *encoder) kvStr(k, v string) func()       { return func() { e.str(k); e.str(v) } }
func (e *encoder) kvInt(k string, v int64) func() { return func() { e.str(k); e.int(v) } }
func (e *encoder) kvUint(k string, v uint64) func() {
	return func() { e.str(k); e.uint(v) }
}
func (e *encoder) kvBool(k string, v bool) func() { return func() { e.str(k); e.bool(v) } }
