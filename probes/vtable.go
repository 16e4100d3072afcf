//go:build linux

package probes

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// A C++ virtual function that no symbol table names (Debian strips
// libc10_cuda.so to its dynamic symbols, and PyTorch exports no allocator
// method) is still found by way of the class's RTTI, which the library
// keeps for dynamic_cast and exceptions: the typeinfo name string
// ("N3c104cuda...NativeCachingAllocatorE") in read-only data, the typeinfo
// object whose second word points at it, the vtable whose word before the
// address point points at the typeinfo, and the slot's function pointer,
// all through R_X86_64_RELATIVE relocations of a position-independent
// library. The function's extent, which its returns are found in, is its
// .eh_frame FDE's (every function of a C++ library has one, for
// unwinding).

// errNoVtable says a class's vtable, or the slot asked, cannot be found.
var errNoVtable = errors.New("no vtable")

// rRelative is R_X86_64_RELATIVE: the word at r_offset is the load base
// plus r_addend.
const rRelative = 8

// vtableMethod returns the address of the function in slot slot (0 at
// the address point, as a call through the vtable indexes it: `call
// *8*slot(%rax)`) of the primary vtable of the class whose typeinfo name
// is typeName.
func vtableMethod(f *elf.File, typeName string, slot int) (uint64, error) {
	name, ok := rodataString(f, typeName)
	if !ok {
		return 0, fmt.Errorf("%w: no typeinfo name %s", errNoVtable, typeName)
	}
	rel, err := relativeRelocs(f)
	if err != nil {
		return 0, err
	}
	// The typeinfo object: {vptr, name, ...}.
	var vtable uint64
	for off, add := range rel {
		if add != name {
			continue
		}
		ti := off - 8
		// The vtable: {offset to top (0), typeinfo, functions...}; the
		// typeinfo word of the primary vtable is preceded by a 0 that no
		// relocation writes (a derived class's typeinfo, which points at
		// this one too, has its name's relocation there).
		for voff, vadd := range rel {
			if vadd != ti {
				continue
			}
			if _, reloc := rel[voff-8]; reloc {
				continue
			}
			if top, err := readWord(f, voff-8); err != nil || top != 0 {
				continue
			}
			if vtable != 0 && vtable != voff+8 {
				return 0, fmt.Errorf("%w: two vtables for %s", errNoVtable, typeName)
			}
			vtable = voff + 8
		}
	}
	if vtable == 0 {
		return 0, fmt.Errorf("%w: for %s", errNoVtable, typeName)
	}
	fn, ok := rel[vtable+8*uint64(slot)]
	if !ok {
		return 0, fmt.Errorf("%w: %s's slot %d holds no function of the file", errNoVtable, typeName, slot)
	}
	if _, ok := elfFileOffset(f, fn); !ok {
		return 0, fmt.Errorf("%w: %s's slot %d points at %#x, not code", errNoVtable, typeName, slot, fn)
	}
	return fn, nil
}

// rodataString returns the address of s, a whole NUL-terminated string,
// in the file's read-only data.
func rodataString(f *elf.File, s string) (uint64, bool) {
	want := []byte("\x00" + s + "\x00")
	for _, sec := range f.Sections {
		if sec.Type != elf.SHT_PROGBITS || sec.Flags&elf.SHF_ALLOC == 0 || sec.Flags&(elf.SHF_WRITE|elf.SHF_EXECINSTR) != 0 ||
			!strings.HasPrefix(sec.Name, ".rodata") {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			continue
		}
		if i := bytes.Index(data, want); i >= 0 {
			return sec.Addr + uint64(i) + 1, true
		}
	}
	return 0, false
}

// relativeRelocs returns the file's R_X86_64_RELATIVE relocations
// (.rela.dyn), as the address each writes and the address it writes.
func relativeRelocs(f *elf.File) (map[uint64]uint64, error) {
	sec := f.Section(".rela.dyn")
	if sec == nil || sec.Type != elf.SHT_RELA {
		return nil, fmt.Errorf("%w: no .rela.dyn", errNoVtable)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read .rela.dyn: %w", err)
	}
	out := make(map[uint64]uint64, len(data)/24)
	le := binary.LittleEndian
	for i := 0; i+24 <= len(data); i += 24 {
		if uint32(le.Uint64(data[i+8:])) == rRelative {
			out[le.Uint64(data[i:])] = le.Uint64(data[i+16:])
		}
	}
	return out, nil
}

// readWord reads the 8-byte word at a virtual address of the file's
// loaded data.
func readWord(f *elf.File, vaddr uint64) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr+8 <= p.Vaddr+p.Filesz {
			var b [8]byte
			if _, err := p.ReadAt(b[:], int64(vaddr-p.Vaddr)); err != nil {
				return 0, err
			}
			return binary.LittleEndian.Uint64(b[:]), nil
		}
	}
	return 0, fmt.Errorf("%#x is not in the file's loaded data", vaddr)
}

// errNoFDE says a function's extent cannot be read from .eh_frame.
var errNoFDE = errors.New("no unwind entry")

// DWARF exception-header pointer encodings (LSB Core, .eh_frame_hdr).
const (
	ehPEUdata4  = 0x03
	ehPESdata4  = 0x0b
	ehPEPcrel   = 0x10
	ehPEDatarel = 0x30
)

// fdeExtent returns the size of the function that starts at addr, from
// its FDE: looked up in .eh_frame_hdr's sorted table, read in .eh_frame.
// Only the encodings GNU toolchains write are read (the table's
// datarel sdata4, the FDE's pcrel sdata4); anything else is an error.
func fdeExtent(f *elf.File, addr uint64) (uint64, error) {
	hdr := f.Section(".eh_frame_hdr")
	eh := f.Section(".eh_frame")
	if hdr == nil || eh == nil {
		return 0, fmt.Errorf("%w: no .eh_frame_hdr", errNoFDE)
	}
	h, err := hdr.Data()
	if err != nil {
		return 0, fmt.Errorf("read .eh_frame_hdr: %w", err)
	}
	frames, err := eh.Data()
	if err != nil {
		return 0, fmt.Errorf("read .eh_frame: %w", err)
	}
	le := binary.LittleEndian
	if len(h) < 12 || h[0] != 1 || h[1]&0x0f != ehPESdata4 || h[2] != ehPEUdata4 || h[3] != ehPEDatarel|ehPESdata4 {
		return 0, fmt.Errorf("%w: .eh_frame_hdr encodings %x not read", errNoFDE, h[:min(4, len(h))])
	}
	n := int(le.Uint32(h[8:]))
	table := h[12:]
	if len(table) < 8*n {
		return 0, fmt.Errorf("%w: .eh_frame_hdr table short", errNoFDE)
	}
	entry := func(i int) (loc, fde uint64) {
		return hdr.Addr + uint64(int64(int32(le.Uint32(table[8*i:])))), hdr.Addr + uint64(int64(int32(le.Uint32(table[8*i+4:]))))
	}
	i := sort.Search(n, func(i int) bool { loc, _ := entry(i); return loc > addr }) - 1
	if i < 0 {
		return 0, fmt.Errorf("%w: for %#x", errNoFDE, addr)
	}
	loc, fde := entry(i)
	if loc != addr || fde < eh.Addr || fde+12 > eh.Addr+uint64(len(frames)) {
		return 0, fmt.Errorf("%w: none starts at %#x", errNoFDE, addr)
	}
	// FDE: length u32, CIE pointer u32, pc_begin, pc_range (the CIE's
	// FDE encoding, checked to be pcrel sdata4 as the table's first
	// column says the start is).
	o := fde - eh.Addr
	if le.Uint32(frames[o:]) == 0xffffffff {
		return 0, fmt.Errorf("%w: 64-bit FDE at %#x", errNoFDE, fde)
	}
	if enc, err := cieFDEEncoding(frames, o+4-uint64(le.Uint32(frames[o+4:]))); err != nil || enc != ehPEPcrel|ehPESdata4 {
		return 0, fmt.Errorf("%w: FDE at %#x: encoding %#x not read (%v)", errNoFDE, fde, enc, err)
	}
	begin := fde + 8 + uint64(int64(int32(le.Uint32(frames[o+8:]))))
	if begin != addr {
		return 0, fmt.Errorf("%w: FDE at %#x starts at %#x, not %#x", errNoFDE, fde, begin, addr)
	}
	return uint64(le.Uint32(frames[o+12:])), nil
}

// cieFDEEncoding reads the FDE pointer encoding (augmentation 'R') of the
// CIE at offset o of .eh_frame; DW_EH_PE_absptr when it has none.
func cieFDEEncoding(frames []byte, o uint64) (byte, error) {
	if o+9 > uint64(len(frames)) || binary.LittleEndian.Uint32(frames[o+4:]) != 0 {
		return 0, errors.New("not a CIE")
	}
	b := frames[o+8:] // version, then the augmentation string
	version := b[0]
	b = b[1:]
	end := bytes.IndexByte(b, 0)
	if end < 0 {
		return 0, errors.New("unterminated augmentation")
	}
	aug := string(b[:end])
	b = b[end+1:]
	if !strings.HasPrefix(aug, "z") {
		return 0, nil
	}
	var err error
	skipLEB := func() {
		for len(b) > 0 {
			c := b[0]
			b = b[1:]
			if c&0x80 == 0 {
				return
			}
		}
		err = errors.New("short CIE")
	}
	skipLEB() // code alignment
	skipLEB() // data alignment
	if version == 1 {
		b = b[min(1, len(b)):]
	} else {
		skipLEB()
	}
	skipLEB() // augmentation data length
	for _, c := range aug[1:] {
		if err != nil || len(b) == 0 {
			return 0, errors.New("short CIE")
		}
		switch c {
		case 'R':
			return b[0], nil
		case 'L':
			b = b[1:]
		case 'P':
			var size int
			switch b[0] & 0x0f {
			case 0x02, 0x0a:
				size = 2
			case 0x03, 0x0b:
				size = 4
			case 0x00, 0x04, 0x0c:
				size = 8
			default:
				return 0, fmt.Errorf("personality encoding %#x", b[0])
			}
			b = b[min(1+size, len(b)):]
		case 'S', 'B':
		default:
			return 0, fmt.Errorf("augmentation %q", aug)
		}
	}
	return 0, nil
}
