package symbolize

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNotELF means a file is not an ELF object.
	ErrNotELF = errors.New("not an ELF file")
	// ErrNotLoaded means a virtual address lies in no loadable segment of
	// the file, so it has no file offset to attach a probe at.
	ErrNotLoaded = errors.New("address in no loadable segment")
)

// demangleOptions shorten C++ names the way pprof's default does: no
// parameter lists and no template arguments, so "ns::Class::method" rather
// than a line-long signature, and one flame-graph node per method.
var demangleOptions = []demangle.Option{demangle.NoParams, demangle.NoEnclosingParams, demangle.NoTemplateParams}

// Symbol is a defined symbol of an ELF file.
type Symbol struct {
	// Name is the linker name with any version split off: "cudaMalloc", not
	// "cudaMalloc@@libcudart.so.12"; C++ names stay mangled.
	Name string
	// Version is the symbol version ("libcudart.so.12"), empty if none.
	Version string
	// Hidden marks a non-default version (foo@V1 beside foo@@V2): the one
	// an unversioned reference does not bind to.
	Hidden bool
	Value  uint64 // virtual address in the file's own address space
	Size   uint64 // bytes; 0 when the object did not say
	Func   bool   // a function (STT_FUNC or STT_GNU_IFUNC)
	Bind   elf.SymBind
}

// rank orders symbols sharing a name or an address: the one a lookup should
// return comes first (default version, function, sized, global, then by
// name for determinism).
func rank(a, b *Symbol) int {
	bindRank := func(s *Symbol) int {
		switch s.Bind {
		case elf.STB_GLOBAL:
			return 0
		case elf.STB_WEAK:
			return 1
		}
		return 2
	}
	return cmp.Or(
		cmpBool(a.Hidden, b.Hidden),
		cmpBool(!a.Func, !b.Func),
		cmpBool(a.Size == 0, b.Size == 0),
		cmp.Compare(bindRank(a), bindRank(b)),
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Version, b.Version),
	)
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// File is an opened ELF object: symbols, build ID and program headers are
// read by OpenFile; demangled names and DWARF lines are computed on first
// use. Methods are safe for concurrent use. A File must be Closed.
type File struct {
	path    string
	osf     *os.File
	ef      *elf.File
	buildID string
	loads   []elf.ProgHeader // PT_LOAD segments, in file order
	syms    []Symbol         // defined symbols, deduplicated, sorted by name then rank
	funcs   []int32          // indexes of function symbols, sorted by address then rank

	mu        sync.Mutex
	demangled map[int32]string

	linesOnce sync.Once
	lines     []lineRow
	linesErr  error
}

// lineRow is one row of the merged DWARF line table: from addr up to the
// next row's addr, code comes from file:line; an end row closes a sequence.
type lineRow struct {
	addr uint64
	file string
	line int64
	end  bool
}

// OpenFile opens an ELF file and reads its program headers, build ID and
// symbol tables; DWARF is left for the first LineAt. Errors match ErrNotELF
// for a file that is not ELF.
func OpenFile(path string) (*File, error) {
	osf, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open ELF: %w", err)
	}
	f, err := newFile(path, osf)
	if err != nil {
		_ = osf.Close()
		return nil, fmt.Errorf("open ELF %s: %w", path, err)
	}
	return f, nil
}

func newFile(path string, osf *os.File) (*File, error) {
	ef, err := elf.NewFile(osf)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return nil, fmt.Errorf("%w: %w", ErrNotELF, err)
		}
		return nil, err
	}
	f := &File{path: path, osf: osf, ef: ef, demangled: make(map[int32]string)}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			f.loads = append(f.loads, p.ProgHeader)
		}
	}
	f.buildID = ReadBuildID(ef)
	if err := f.readSymbols(); err != nil {
		return nil, err
	}
	return f, nil
}

// Close releases the file.
func (f *File) Close() error { return f.osf.Close() }

// Path returns the path the file was opened by.
func (f *File) Path() string { return f.path }

// BuildID returns the hex GNU build ID, or "" when the file has none.
func (f *File) BuildID() string { return f.buildID }

// Type returns the ELF type: elf.ET_EXEC for a fixed-address executable,
// elf.ET_DYN for a shared library or a position-independent executable.
func (f *File) Type() elf.Type { return f.ef.Type }

// readSymbols merges .symtab and .dynsym. The same function usually appears
// in both, .dynsym adding its version; an entry is one (name, version,
// address), so versioned duplicates collapse into one Symbol.
func (f *File) readSymbols() error {
	type key struct {
		name  string
		value uint64
	}
	seen := make(map[key]int)
	add := func(s elf.Symbol, dynamic bool) {
		typ := elf.ST_TYPE(s.Info)
		switch {
		case s.Section == elf.SHN_UNDEF, s.Section == elf.SHN_ABS, s.Section == elf.SHN_COMMON,
			typ == elf.STT_SECTION, typ == elf.STT_FILE, s.Name == "":
			return // not a definition of code or data at an address
		}
		sym := Symbol{
			Name:  s.Name,
			Value: s.Value,
			Size:  s.Size,
			Func:  typ == elf.STT_FUNC || typ == elf.STT_GNU_IFUNC,
			Bind:  elf.ST_BIND(s.Info),
		}
		if dynamic && s.HasVersion {
			sym.Version = s.Version
			sym.Hidden = s.VersionIndex.IsHidden()
		}
		// .symtab spells versions into the name for symbols defined with
		// .symver ("foo@LIBFOO_1.0", "foo@@LIBFOO_2.0").
		if name, ver, ok := strings.Cut(s.Name, "@"); ok && name != "" {
			sym.Name = name
			sym.Hidden = !strings.HasPrefix(ver, "@")
			sym.Version = strings.TrimPrefix(ver, "@")
		}
		k := key{sym.Name, sym.Value}
		if i, ok := seen[k]; ok {
			old := &f.syms[i]
			if old.Version == "" && sym.Version != "" {
				old.Version, old.Hidden = sym.Version, sym.Hidden
			}
			if old.Size == 0 {
				old.Size = sym.Size
			}
			return
		}
		seen[k] = len(f.syms)
		f.syms = append(f.syms, sym)
	}
	// .symtab first: it has local functions and sizes; .dynsym adds versions.
	for _, load := range []struct {
		read    func() ([]elf.Symbol, error)
		dynamic bool
	}{{f.ef.Symbols, false}, {f.ef.DynamicSymbols, true}} {
		syms, err := load.read()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return fmt.Errorf("read symbols: %w", err)
		}
		for _, s := range syms {
			add(s, load.dynamic)
		}
	}
	slices.SortFunc(f.syms, func(a, b Symbol) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), rank(&a, &b), cmp.Compare(a.Value, b.Value))
	})
	for i := range f.syms {
		if f.syms[i].Func {
			f.funcs = append(f.funcs, int32(i))
		}
	}
	slices.SortFunc(f.funcs, func(a, b int32) int {
		sa, sb := &f.syms[a], &f.syms[b]
		return cmp.Or(cmp.Compare(sa.Value, sb.Value), rank(sa, sb))
	})
	return nil
}

// Lookup finds a defined symbol by linker name, for attaching: "cudaMalloc"
// finds cudaMalloc@@libcudart.so.12. When versions of a name coexist, the
// default one wins; "name@VERSION" (or "name@@VERSION") asks for a version.
// Symbols of size 0 are found too. Undefined references (an executable's
// imports) are not: only where the code is.
func (f *File) Lookup(name string) (Symbol, bool) {
	base, version, versioned := strings.Cut(name, "@")
	version = strings.TrimPrefix(version, "@")
	i, _ := slices.BinarySearchFunc(f.syms, base, func(s Symbol, n string) int { return strings.Compare(s.Name, n) })
	for ; i < len(f.syms) && f.syms[i].Name == base; i++ {
		if !versioned || f.syms[i].Version == version {
			return f.syms[i], true // sorted by rank within a name
		}
	}
	return Symbol{}, false
}

// Symbols returns the defined symbols whose name match accepts (all for a
// nil match), sorted by name, best-ranked first within a name.
func (f *File) Symbols(match func(name string) bool) []Symbol {
	var out []Symbol
	for _, s := range f.syms {
		if match == nil || match(s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// FileOffset converts a symbol's virtual address to the file offset a
// uprobe is attached at.
func (f *File) FileOffset(vaddr uint64) (uint64, error) {
	for _, p := range f.loads {
		if vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("%#x in %s: %w", vaddr, f.path, ErrNotLoaded)
}

// ReadVirtual reads n bytes of the file's initialized contents (code or
// data, not .bss) at a link-time virtual address: what a symbol's value
// points at. Errors match ErrNotLoaded when the n bytes do not lie within
// one loadable segment's file image.
func (f *File) ReadVirtual(vaddr, n uint64) ([]byte, error) {
	for _, p := range f.loads {
		if vaddr < p.Vaddr || vaddr+n > p.Vaddr+p.Filesz {
			continue
		}
		b := make([]byte, n)
		if _, err := f.osf.ReadAt(b, int64(vaddr-p.Vaddr+p.Off)); err != nil {
			return nil, fmt.Errorf("read %d bytes at %#x in %s: %w", n, vaddr, f.path, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%#x (%d bytes) in %s: %w", vaddr, n, f.path, ErrNotLoaded)
}

// segmentAt returns the loadable segment whose file image holds file
// offset off.
func (f *File) segmentAt(off uint64) (*elf.ProgHeader, bool) {
	for i := range f.loads {
		if p := &f.loads[i]; off >= p.Off && off < p.Off+p.Filesz {
			return p, true
		}
	}
	return nil, false
}

// LoadBias returns what to add to the file's link-time addresses to get
// the run-time ones of a process that maps the file at m: the segment
// holding m.Offset was mapped at m.Start - (m.Offset - phdr.Off), so the
// bias is m.Start - (m.Offset - phdr.Off + phdr.Vaddr). It is 0 for a
// fixed-address executable. False when no loadable segment holds
// m.Offset (m is not a mapping of this file).
func (f *File) LoadBias(m *MapEntry) (uint64, bool) {
	p, ok := f.segmentAt(m.Offset)
	if !ok {
		return 0, false
	}
	return m.Start - (m.Offset - p.Off + p.Vaddr), true
}

// VirtualAddr converts a runtime address inside mapping m of this file to
// the file's own virtual address, the space symbols and DWARF live in. The
// load bias comes from the segment holding the file offset:
// vaddr = (addr - m.Start + m.Offset) - phdr.Off + phdr.Vaddr. This covers
// PIE executables and libraries (loaded anywhere) and fixed-address
// executables (bias 0) alike.
func (f *File) VirtualAddr(m *MapEntry, addr uint64) (uint64, bool) {
	if !m.Contains(addr) {
		return 0, false
	}
	off := addr - m.Start + m.Offset
	p, ok := f.segmentAt(off)
	if !ok {
		return 0, false
	}
	return off - p.Off + p.Vaddr, true
}

// ELF returns the parsed ELF headers, for what File does not read itself
// (sections, imported libraries). Valid until Close; not to be closed by
// the caller.
func (f *File) ELF() *elf.File { return f.ef }

// SymbolAt returns the function containing vaddr. A function of size 0
// extends to the next function.
func (f *File) SymbolAt(vaddr uint64) (Symbol, bool) {
	i, ok := f.funcAt(vaddr)
	if !ok {
		return Symbol{}, false
	}
	return f.syms[i], true
}

// FunctionAt returns the demangled name of the function containing vaddr.
func (f *File) FunctionAt(vaddr uint64) (string, bool) {
	i, ok := f.funcAt(vaddr)
	if !ok {
		return "", false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name, ok := f.demangled[i]
	if !ok {
		// Demangled on demand: a big C++ library has hundreds of thousands
		// of symbols and a stack touches a few dozen.
		name = Demangle(f.syms[i].Name)
		f.demangled[i] = name
	}
	return name, true
}

// funcAt returns the index in syms of the function containing vaddr.
func (f *File) funcAt(vaddr uint64) (int32, bool) {
	n := sort.Search(len(f.funcs), func(i int) bool { return f.syms[f.funcs[i]].Value > vaddr })
	if n == 0 {
		return 0, false
	}
	i := n - 1
	for i > 0 && f.syms[f.funcs[i-1]].Value == f.syms[f.funcs[i]].Value {
		i-- // the best-ranked alias at this address
	}
	s := &f.syms[f.funcs[i]]
	if s.Size > 0 && vaddr >= s.Value+s.Size {
		return 0, false
	}
	return f.funcs[i], true
}

// Demangle returns the short form of a C++ or Rust linker name
// ("ns::Class::method"), or name itself when it is not mangled.
func Demangle(name string) string {
	return demangle.Filter(name, demangleOptions...)
}

// LineAt returns the source file and line of vaddr from DWARF .debug_line.
// The first call parses the line tables of the whole file; a file without
// them answers false at once.
func (f *File) LineAt(vaddr uint64) (file string, line int64, ok bool) {
	f.linesOnce.Do(f.loadLines)
	rows := f.lines
	n := sort.Search(len(rows), func(i int) bool { return rows[i].addr > vaddr })
	if n == 0 {
		return "", 0, false
	}
	r := rows[n-1]
	if r.end || r.line == 0 {
		return "", 0, false
	}
	return r.file, r.line, true
}

// LinesErr returns why DWARF lines could not be loaded, if they could not.
// Only meaningful after a LineAt.
func (f *File) LinesErr() error {
	f.linesOnce.Do(f.loadLines)
	return f.linesErr
}

func (f *File) loadLines() {
	if f.ef.Section(".debug_line") == nil && f.ef.Section(".zdebug_line") == nil {
		return
	}
	d, err := f.ef.DWARF()
	if err != nil {
		f.linesErr = fmt.Errorf("read DWARF of %s: %w", f.path, err)
		return
	}
	names := make(map[string]string) // one copy of each file name
	var rows []lineRow
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			f.linesErr = fmt.Errorf("read DWARF of %s: %w", f.path, err)
			break
		}
		if e == nil {
			break
		}
		// Only unit headers are read: their children (types, variables,
		// inlined calls) are most of .debug_info and say nothing of lines.
		r.SkipChildren()
		if e.Tag != dwarf.TagCompileUnit && e.Tag != dwarf.TagPartialUnit {
			continue
		}
		lr, err := d.LineReader(e)
		if err != nil || lr == nil {
			continue // a unit without a line table
		}
		var le dwarf.LineEntry
		for {
			if err := lr.Next(&le); err != nil {
				if !errors.Is(err, io.EOF) {
					f.linesErr = fmt.Errorf("read DWARF lines of %s: %w", f.path, err)
				}
				break
			}
			name := ""
			if le.File != nil {
				name = le.File.Name
				if s, ok := names[name]; ok {
					name = s
				} else {
					names[name] = name
				}
			}
			rows = append(rows, lineRow{addr: le.Address, file: name, line: int64(le.Line), end: le.EndSequence})
		}
	}
	// One table for the whole file, sorted by address: units and sequences
	// come in any order, and a binary search then answers each lookup.
	// At an address where one sequence ends and the next begins, the start
	// must win: order end rows first, then keep the last row per address.
	slices.SortStableFunc(rows, func(a, b lineRow) int {
		return cmp.Or(cmp.Compare(a.addr, b.addr), cmpBool(!a.end, !b.end))
	})
	out := rows[:0]
	for _, r := range rows {
		if len(out) > 0 && out[len(out)-1].addr == r.addr {
			out[len(out)-1] = r
			continue
		}
		out = append(out, r)
	}
	f.lines = slices.Clip(out)
}

// ReadBuildID returns the hex NT_GNU_BUILD_ID note, from the section when
// there are section headers, else from the PT_NOTE segments.
func ReadBuildID(ef *elf.File) string {
	var notes [][]byte
	if s := ef.Section(".note.gnu.build-id"); s != nil {
		if b, err := s.Data(); err == nil {
			notes = append(notes, b)
		}
	}
	if len(notes) == 0 {
		for _, p := range ef.Progs {
			if p.Type != elf.PT_NOTE || p.Filesz > 1<<20 {
				continue
			}
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				notes = append(notes, b)
			}
		}
	}
	for _, b := range notes {
		if id := findNote(b, ef.ByteOrder, "GNU", 3 /* NT_GNU_BUILD_ID */); id != nil {
			return hex.EncodeToString(id)
		}
	}
	return ""
}

// findNote walks ELF notes (namesz, descsz, type, name, desc; name and desc
// padded to 4 bytes) and returns the desc of the first matching one.
func findNote(b []byte, order binary.ByteOrder, name string, typ uint32) []byte {
	align := func(n uint64) uint64 { return (n + 3) &^ 3 }
	for len(b) >= 12 {
		namesz, descsz, t := uint64(order.Uint32(b)), uint64(order.Uint32(b[4:])), order.Uint32(b[8:])
		b = b[12:]
		if align(namesz) > uint64(len(b)) || align(namesz)+align(descsz) > uint64(len(b)) {
			return nil
		}
		n := strings.TrimRight(string(b[:namesz]), "\x00")
		desc := b[align(namesz) : align(namesz)+descsz]
		if t == typ && n == name {
			return desc
		}
		b = b[align(namesz)+align(descsz):]
	}
	return nil
}
