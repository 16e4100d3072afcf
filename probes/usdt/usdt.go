package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNoNotes means the file has no .note.stapsdt section: it carries no
	// USDT probes (or was stripped of them).
	ErrNoNotes = errors.New("no .note.stapsdt section")
	// ErrMalformedNote means a note of .note.stapsdt is truncated or
	// inconsistent; the error names the note by index.
	ErrMalformedNote = errors.New("malformed stapsdt note")
	// ErrNotLoaded means a probe or semaphore address lies in no loadable
	// segment of the file, so it has no file offset to attach at.
	ErrNotLoaded = errors.New("address in no loadable segment")
)

// SystemTap SDT v3, as written by <sys/sdt.h>.
const (
	noteOwner   = "stapsdt"
	noteType    = 3 // NT_STAPSDT
	noteSection = ".note.stapsdt"
	// baseSection holds one byte whose link-time address every note
	// records, so that a tool seeing the section elsewhere (the file was
	// prelinked after the notes were written) can shift the addresses.
	baseSection = ".stapsdt.base"
)

// Probe is one USDT probe of an ELF file: the note as written, its parsed
// arguments, and the file offsets a uprobe attaches at.
type Probe struct {
	Provider string
	Name     string
	// PC, Base and Semaphore are the note's three addresses as linked: the
	// probe's nop, the address of .stapsdt.base when the note was written,
	// and the semaphore (0 for none).
	PC, Base, Semaphore uint64
	// ArgSpec is the note's argument string, "8@%rax -4@$-5".
	ArgSpec string
	// Args is ArgSpec parsed; a spec that did not parse is a
	// KindUnsupported Arg carrying its text.
	Args []Arg
	// Offset is the file offset of the probe's nop: PC shifted by
	// (address of .stapsdt.base) - Base, then mapped through the PT_LOAD
	// segment holding it. cilium/ebpf's Executable.Uprobe takes it as
	// UprobeOptions.Address.
	Offset uint64
	// SemaphoreOffset is the file offset of the semaphore, the reference
	// counter the kernel increments while the probe is attached
	// (UprobeOptions.RefCtrOffset); 0 when the probe has none.
	SemaphoreOffset uint64
}

// String returns "provider:name".
func (p Probe) String() string { return p.Provider + ":" + p.Name }

// Open reads the USDT probes of the ELF file at path. See Probes.
func Open(path string) ([]Probe, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open ELF: %w", err)
	}
	defer f.Close()
	probes, err := Probes(f)
	if err != nil {
		return nil, fmt.Errorf("read USDT probes of %s: %w", path, err)
	}
	return probes, nil
}

// Probes reads the USDT probes of an ELF executable or shared object, in
// note order. It returns ErrNoNotes when the file has no .note.stapsdt
// section, and an error matching ErrMalformedNote or ErrNotLoaded, naming
// the note by its index in the section, when a note is truncated or its
// addresses lie outside the loadable segments. Notes of other owners or
// types are skipped. Argument specs that do not parse are not errors (see
// Probe.Args): one odd probe must not hide the others.
func Probes(f *elf.File) ([]Probe, error) {
	sec := f.Section(noteSection)
	if sec == nil {
		return nil, ErrNoNotes
	}
	if sec.Type != elf.SHT_NOTE {
		return nil, fmt.Errorf("%s is %v, not SHT_NOTE: %w", noteSection, sec.Type, ErrMalformedNote)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", noteSection, err)
	}
	addrSize := 8
	if f.Class == elf.ELFCLASS32 {
		addrSize = 4
	}
	notes, err := parseNotes(data, f.ByteOrder, addrSize)
	if err != nil {
		return nil, err
	}
	// Prelink moves a library after the notes were written; the notes,
	// not being allocated, keep the old addresses. .stapsdt.base moved
	// with everything else, so the shift is its address now minus the one
	// in the note.
	var baseNow uint64
	haveBase := false
	if s := f.Section(baseSection); s != nil {
		baseNow, haveBase = s.Addr, true
	}
	var loads []elf.ProgHeader
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			loads = append(loads, p.ProgHeader)
		}
	}
	probes := make([]Probe, 0, len(notes))
	for _, n := range notes {
		p := n.probe
		var delta uint64
		if haveBase && p.Base != 0 {
			delta = baseNow - p.Base // modular: a move down wraps and adds back
		}
		p.Offset, err = fileOffset(loads, p.PC+delta)
		if err != nil {
			return nil, fmt.Errorf("note %d (%s): pc %#x: %w", n.index, p, p.PC, err)
		}
		if p.Semaphore != 0 {
			p.SemaphoreOffset, err = fileOffset(loads, p.Semaphore+delta)
			if err != nil {
				return nil, fmt.Errorf("note %d (%s): semaphore %#x: %w", n.index, p, p.Semaphore, err)
			}
		}
		p.Args, _ = ParseArgs(p.ArgSpec) // malformed specs are KindUnsupported Args
		probes = append(probes, p)
	}
	return probes, nil
}

// fileOffset maps a virtual address to its file offset through the PT_LOAD
// segment holding it in its file-backed part: a semaphore in .bss would have
// no bytes in the file for the kernel to count in.
func fileOffset(loads []elf.ProgHeader, vaddr uint64) (uint64, error) {
	for _, p := range loads {
		if vaddr >= p.Vaddr && vaddr-p.Vaddr < p.Filesz {
			return vaddr - p.Vaddr + p.Off, nil
		}
	}
	return 0, ErrNotLoaded
}

// note is a stapsdt note with its index among all notes of the section.
type note struct {
	index int
	probe Probe
}

// parseNotes walks the notes of a .note.stapsdt section (namesz, descsz,
// type, then name and desc, each padded to 4 bytes) and decodes those of
// owner "stapsdt" and type 3. The desc is three addresses of addrSize bytes
// (pc, base, semaphore) and three NUL-terminated strings (provider, name,
// arguments).
func parseNotes(data []byte, order binary.ByteOrder, addrSize int) ([]note, error) {
	align4 := func(n uint64) uint64 { return (n + 3) &^ 3 }
	var notes []note
	for index, rest := 0, data; len(rest) > 0; index++ {
		if len(rest) < 12 {
			return nil, fmt.Errorf("note %d: %d bytes left, header needs 12: %w", index, len(rest), ErrMalformedNote)
		}
		namesz, descsz, typ := uint64(order.Uint32(rest)), uint64(order.Uint32(rest[4:])), order.Uint32(rest[8:])
		rest = rest[12:]
		// Sizes come from a u32 each, so these sums cannot overflow a u64.
		if align4(namesz)+descsz > uint64(len(rest)) {
			return nil, fmt.Errorf("note %d: name of %d and desc of %d bytes overrun the section's %d: %w",
				index, namesz, descsz, len(rest), ErrMalformedNote)
		}
		name := rest[:namesz]
		desc := rest[align4(namesz) : align4(namesz)+descsz]
		// The last note's desc padding may be cut by the section end.
		rest = rest[min(align4(namesz)+align4(descsz), uint64(len(rest))):]
		if typ != noteType || string(bytes.TrimRight(name, "\x00")) != noteOwner {
			continue
		}
		p, err := parseDesc(desc, order, addrSize)
		if err != nil {
			return nil, fmt.Errorf("note %d: %w: %w", index, err, ErrMalformedNote)
		}
		notes = append(notes, note{index: index, probe: p})
	}
	return notes, nil
}

// parseDesc decodes one stapsdt desc.
func parseDesc(desc []byte, order binary.ByteOrder, addrSize int) (Probe, error) {
	var p Probe
	if len(desc) < 3*addrSize {
		return p, fmt.Errorf("desc of %d bytes, addresses need %d", len(desc), 3*addrSize)
	}
	addr := func(b []byte) uint64 {
		if addrSize == 4 {
			return uint64(order.Uint32(b))
		}
		return order.Uint64(b)
	}
	p.PC, p.Base, p.Semaphore = addr(desc), addr(desc[addrSize:]), addr(desc[2*addrSize:])
	rest := desc[3*addrSize:]
	for i, s := range []*string{&p.Provider, &p.Name, &p.ArgSpec} {
		end := bytes.IndexByte(rest, 0)
		if end < 0 {
			return p, fmt.Errorf("%s not NUL-terminated", [...]string{"provider", "name", "arguments"}[i])
		}
		*s, rest = string(rest[:end]), rest[end+1:]
	}
	if p.Provider == "" || p.Name == "" {
		return p, errors.New("empty provider or name")
	}
	return p, nil
}
