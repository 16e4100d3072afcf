package python

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeProcess lays CPython objects out in this test process's own memory,
// by a Layout, for a Resolver pointed at os.Getpid(): the cases no real
// interpreter here produces on demand (3.14's tagged pointers, malformed
// objects). Go's heap does not move objects; keep holds them alive.
type fakeProcess struct {
	l                 Layout
	keep              [][]uint64
	code, str, bytes_ uint64 // the type objects' addresses
}

func newFakeProcess(l Layout) *fakeProcess {
	p := &fakeProcess{l: l}
	p.code, _ = p.alloc(64)
	p.str, _ = p.alloc(64)
	p.bytes_, _ = p.alloc(64)
	return p
}

// alloc returns n zero bytes, 8-byte aligned, and their address.
func (p *fakeProcess) alloc(n int) (uint64, []byte) {
	words := make([]uint64, n/8+2)
	p.keep = append(p.keep, words)
	return uint64(uintptr(unsafe.Pointer(&words[0]))), unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}

func (p *fakeProcess) put(b []byte, off int64, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }

// newStr makes a compact str object, in the narrowest kind that holds s.
func (p *fakeProcess) newStr(s string) uint64 {
	addr, _ := p.newStrBytes(s)
	return addr
}

// newStrBytes is newStr, also returning the object's bytes.
func (p *fakeProcess) newStrBytes(s string) (uint64, []byte) {
	kind, ascii := 1, true
	for _, r := range s {
		switch {
		case r > 0xffff:
			kind, ascii = 4, false
		case r > 0xff:
			kind, ascii = max(kind, 2), false
		case r > 0x7f:
			ascii = false
		}
	}
	data := p.l.UnicodeCompactData
	if ascii {
		data = p.l.UnicodeASCIIData
	}
	n := utf8.RuneCountInString(s)
	addr, b := p.alloc(int(data) + n*kind)
	p.put(b, p.l.ObjectType, p.str)
	p.put(b, p.l.UnicodeLength, uint64(n))
	state := uint32(kind)<<stateKindShift | stateCompact
	if ascii {
		state |= stateASCII
	}
	binary.LittleEndian.PutUint32(b[p.l.UnicodeState:], state)
	i := int(data)
	for _, r := range s {
		switch kind {
		case 1:
			b[i] = byte(r)
		case 2:
			binary.LittleEndian.PutUint16(b[i:], uint16(r))
		case 4:
			binary.LittleEndian.PutUint32(b[i:], uint32(r))
		}
		i += kind
	}
	return addr, b
}

// newBytes makes a bytes object.
func (p *fakeProcess) newBytes(data []byte) uint64 {
	addr, b := p.alloc(int(p.l.BytesData) + len(data) + 1)
	p.put(b, p.l.ObjectType, p.bytes_)
	p.put(b, p.l.BytesSize, uint64(len(data)))
	copy(b[p.l.BytesData:], data)
	return addr
}

// fakeCode describes a code object to lay out.
type fakeCode struct {
	name, qualname, file string
	firstLine            int32
	table                []byte
	units                int // bytecode length in code units
}

// newCode makes a code object; the returned bytes allow breaking it.
func (p *fakeProcess) newCode(c fakeCode) (uint64, []byte) {
	size := int(max(p.l.CodeName, p.l.CodeFilename, p.l.CodeLinetable, p.l.CodeFirstLineno, p.l.CodeCode) + 8)
	if p.l.CodeAdaptive >= 0 {
		size = int(p.l.CodeAdaptive) + 2*c.units
	}
	addr, b := p.alloc(size)
	p.put(b, p.l.ObjectType, p.code)
	p.put(b, p.l.VarObjectSize, uint64(c.units))
	p.put(b, p.l.CodeName, p.newStr(c.name))
	if p.l.CodeQualname >= 0 {
		p.put(b, p.l.CodeQualname, p.newStr(c.qualname))
	}
	p.put(b, p.l.CodeFilename, p.newStr(c.file))
	binary.LittleEndian.PutUint32(b[p.l.CodeFirstLineno:], uint32(c.firstLine))
	p.put(b, p.l.CodeLinetable, p.newBytes(c.table))
	if p.l.CodeCode >= 0 {
		p.put(b, p.l.CodeCode, p.newBytes(make([]byte, 2*c.units)))
	}
	return addr, b
}

// resolver returns a Resolver over this process for the fake objects.
func (p *fakeProcess) resolver(t *testing.T, v Version) *Resolver {
	in := &Interpreter{Version: v, Layout: p.l, CodeType: p.code, UnicodeType: p.str, BytesType: p.bytes_}
	r := NewResolver(os.Getpid(), in)
	t.Cleanup(func() {
		assert.NoError(t, r.Close())
		runtime.KeepAlive(p)
	})
	return r
}

// TestResolveFake314: 3.14's tagged f_executable and every string kind,
// with a line table in the 3.11+ format.
func TestResolveFake314(t *testing.T) {
	d, err := decodeDebugOffsets(debugBlob(debugFields314, func() map[string]uint64 {
		v := debugValues313()
		v["version"] = 0x030e00f0
		return v
	}()), 14)
	require.NoError(t, err)
	l, err := d.layout()
	require.NoError(t, err)
	p := newFakeProcess(l)
	table := []byte{
		0x80 | 13<<3 | 1, 0x02, // 2 units, line +1
		0x80 | 11<<3 | 2, 0, 0, // 3 units, line +1
	}
	tests := []struct{ name, qualname, file string }{
		{"f", "K.f", "/src/ascii.py"},
		{"größe", "Klasse.größe", "/src/größe.py"},
		{"функция", "функция", "/src/функция.py"},
		{"𠀀", "K.<locals>.𠀀", "/src/𠀀.py"},
	}
	r := p.resolver(t, versionFromHex(0x030e00f0))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _ := p.newCode(fakeCode{name: tt.name, qualname: tt.qualname, file: tt.file, firstLine: 10, table: table, units: 5})
			for tag := range uint64(2) {
				for unit, line := range []int64{11, 11, 12, 12, 12} {
					instr := code + uint64(l.CodeAdaptive) + 2*uint64(unit) | 3<<56
					f, ok := r.Frame(code|tag, instr)
					require.True(t, ok)
					assert.Equal(t, tt.qualname, f.Function)
					assert.Equal(t, tt.file, f.File)
					assert.Equal(t, line, f.Line, "unit %d", unit)
					assert.Equal(t, code, f.Addr)
				}
			}
			f, ok := r.Frame(code, code+uint64(l.CodeAdaptive)-2)
			assert.True(t, ok)
			assert.Equal(t, int64(10), f.Line, "before the first instruction")
			f, ok = r.Frame(code, code+uint64(l.CodeAdaptive)+10)
			assert.True(t, ok)
			assert.Zero(t, f.Line, "past the bytecode")
		})
	}
}

// TestResolveFake310: co_name, the bytecode's length from co_code, and
// the C int f_lasti.
func TestResolveFake310(t *testing.T) {
	p := newFakeProcess(layout310)
	code, _ := p.newCode(fakeCode{name: "größe", file: "m.py", firstLine: 7, table: []byte{4, 1, 4, 2}, units: 4})
	r := p.resolver(t, Version{3, 10, 0})
	for instr, line := range map[uint64]int64{0xffffffff: 7, 0: 8, 1: 8, 2: 10, 3: 10, 4: 0, 0x7fffffff: 0} {
		f, ok := r.Frame(code, instr)
		require.True(t, ok)
		assert.Equal(t, "größe", f.Function)
		assert.Equal(t, line, f.Line, "f_lasti %#x", instr)
	}
}

// TestResolveFakeRefused: objects that are not what they claim give a
// placeholder, never a name.
func TestResolveFakeRefused(t *testing.T) {
	l := layout312
	good := fakeCode{name: "f", qualname: "f", file: "f.py", firstLine: 1, table: []byte{0x80}, units: 1}
	tests := []struct {
		name   string
		break_ func(p *fakeProcess, b []byte)
	}{
		{"type", func(p *fakeProcess, b []byte) { p.put(b, l.ObjectType, p.str) }},
		{"qualname not str", func(p *fakeProcess, b []byte) { p.put(b, l.CodeQualname, p.newBytes([]byte("f"))) }},
		{"filename null", func(p *fakeProcess, b []byte) { p.put(b, l.CodeFilename, 0) }},
		{"filename unmapped", func(p *fakeProcess, b []byte) { p.put(b, l.CodeFilename, 0x10) }},
		{"line table not bytes", func(p *fakeProcess, b []byte) { p.put(b, l.CodeLinetable, p.newStr("x")) }},
		{"huge bytecode", func(p *fakeProcess, b []byte) { p.put(b, l.VarObjectSize, 1<<40) }},
		{"huge name", func(p *fakeProcess, b []byte) {
			s, sb := p.newStrBytes("f")
			p.put(sb, l.UnicodeLength, 1<<30)
			p.put(b, l.CodeQualname, s)
		}},
		{"name not compact", func(p *fakeProcess, b []byte) {
			s, sb := p.newStrBytes("f")
			binary.LittleEndian.PutUint32(sb[l.UnicodeState:], 1<<stateKindShift)
			p.put(b, l.CodeQualname, s)
		}},
		{"name kind 3", func(p *fakeProcess, b []byte) {
			s, sb := p.newStrBytes("fé")
			binary.LittleEndian.PutUint32(sb[l.UnicodeState:], 3<<stateKindShift|stateCompact)
			p.put(b, l.CodeQualname, s)
		}},
		{"surrogate code point", func(p *fakeProcess, b []byte) {
			s, sb := p.newStrBytes("фф")
			binary.LittleEndian.PutUint16(sb[l.UnicodeCompactData:], 0xd800)
			p.put(b, l.CodeQualname, s)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newFakeProcess(l)
			code, b := p.newCode(good)
			r := p.resolver(t, Version{3, 12, 1})
			f, ok := r.Frame(code, 0)
			require.True(t, ok, "before breaking it")
			require.Equal(t, "f", f.Function)

			tt.break_(p, b)
			r = p.resolver(t, Version{3, 12, 1}) // a fresh cache
			f, ok = r.Frame(code, 0)
			assert.False(t, ok)
			assert.Equal(t, fmt.Sprintf("<python code %#x>", code), f.Function)
		})
	}
}
