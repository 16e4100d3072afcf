//go:build linux

package probes

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/vramprof/vramprof/probes/allocspec"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/usdt"

	"github.com/vramprof/vramprof/probes/symbolize"
)

// fileKey identifies a file independently of the path it was reached by:
// uprobes are per inode, so each file is probed once however many processes
// or mount namespaces map it.
type fileKey struct {
	Dev   uint64
	Inode uint64
}

// candidate is an executable file mapped by a target, to be examined for
// probe symbols.
type candidate struct {
	Key      fileKey
	Path     string // as the target maps it
	OpenPath string // where this process can open it: /proc/PID/root/<path>
}

// candidates lists the distinct executable files pid maps, reached through
// /proc/PID/root so that files in another mount namespace (a container) are
// the ones the target really runs.
func candidates(pid int, maps []symbolize.MapEntry) []candidate {
	seen := make(map[string]bool)
	var out []candidate
	for _, m := range maps {
		if !m.Exec() || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		open := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), m.Path)
		var st syscall.Stat_t
		if err := syscall.Stat(open, &st); err != nil {
			continue // unlinked or raced with an unmap: nothing to probe there
		}
		out = append(out, candidate{Key: fileKey{Dev: st.Dev, Inode: st.Ino}, Path: m.Path, OpenPath: open})
	}
	return out
}

// target is a probe to place: a function at a file offset in one file, or
// a USDT probe site.
type target struct {
	Spec   probeSpec
	Offset uint64 // file offset of the function's first instruction, or of the USDT nop
	// USDT, for progUSDT: the site's arguments and semaphore.
	USDT *usdt.Probe
	// Func, for progSpec: where its arguments are, and its returns.
	Func *specFunc
	// Call, for progCall: where it returns.
	Call *callFunc
}

// probedFile is a file that holds functions to probe.
type probedFile struct {
	candidate
	BuildID string
	Targets []target
	// Skipped are CUDA and allocator-spec functions found but not probed,
	// with the reason (event.Library.Skipped): their returns cannot all be
	// found.
	Skipped []string
	// StrippedRuntime: the file holds a CUDA runtime without its symbols
	// (hasStrippedRuntime), so nothing of it is probed.
	StrippedRuntime bool
}

// cudaSymbols lists the CUDA functions probed in the file (not the
// loader's); a scope function once, not again for each of its returns.
func (pf *probedFile) cudaSymbols() []string {
	var syms []string
	for _, t := range pf.Targets {
		if t.Spec.Prog != progLoader && !t.scopeEnd() {
			syms = append(syms, t.Spec.Symbol)
		}
	}
	return syms
}

// library reports whether the file gets a Library record where it is
// mapped: CUDA functions probed in it, or ones it holds that could not be
// (Skipped, a stripped runtime). The loader alone does not.
func (pf *probedFile) library() bool {
	for _, t := range pf.Targets {
		if t.Spec.Prog != progLoader {
			return true
		}
	}
	return len(pf.Skipped) > 0 || pf.StrippedRuntime
}

// scanFile looks for specs' symbols in the ELF file at c.OpenPath. It
// returns nil, nil for a file that holds none of them, so the caller can
// remember not to look again. The check is two-stage: string tables are
// searched for the names first (cheap, bytes only), and the symbol tables
// are decoded only for the few files that pass: a trainer maps hundreds of
// libraries, some of them a gigabyte, and attach must be quick.
//
// allocs are the allocator specs (block layer): a file whose base name one
// of them matches has its symbols read and demangled for the functions they
// name.
//
// A file that defines none of the CUDA functions but holds a stripped
// runtime comes back with StrippedRuntime set, so that the user is told
// what cannot be seen.
func scanFile(c candidate, specs []probeSpec, withUSDT bool, allocs []allocspec.Allocator) (*probedFile, error) {
	ef, err := elf.Open(c.OpenPath)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return nil, nil // not ELF: nothing to probe
		}
		return nil, fmt.Errorf("open ELF %s: %w", c.Path, err)
	}
	defer ef.Close()
	pf, err := scanELF(ef, c, specs, withUSDT, allocs)
	if err != nil || (pf != nil && len(pf.cudaSymbols()) > 0) || !hasStrippedRuntime(ef) {
		return pf, err
	}
	if pf == nil {
		pf = &probedFile{candidate: c, BuildID: symbolize.ReadBuildID(ef)}
	}
	pf.StrippedRuntime = true
	return pf, nil
}

// scanELF is scanFile's search for symbols and USDT sites in the opened ef.
func scanELF(ef *elf.File, c candidate, specs []probeSpec, withUSDT bool, allocs []allocspec.Allocator) (*probedFile, error) {
	var err error
	// One open for the cheap screening of every mapped file; the symbol
	// tables are read (symbolize.OpenFile) only for the few that pass.
	var sites []target
	var scopeSkipped []string
	if withUSDT {
		if sites, err = usdtTargets(ef); err != nil {
			return nil, fmt.Errorf("read USDT notes of %s: %w", c.Path, err)
		}
		reports, err := oomReportTargets(ef)
		if err != nil {
			return nil, fmt.Errorf("read dynamic symbols of %s: %w", c.Path, err)
		}
		sites = append(sites, reports...)
		scopes, skipped, err := scopeTargets(ef, c)
		if err != nil {
			return nil, err
		}
		sites = append(sites, scopes...)
		scopeSkipped = skipped
	}
	spec := specAllocators(c.Path, allocs)
	if len(spec) == 0 && !stringTablesMention(ef, specs) {
		if len(sites) == 0 {
			return nil, nil
		}
		return &probedFile{candidate: c, BuildID: symbolize.ReadBuildID(ef), Targets: sites, Skipped: scopeSkipped}, nil
	}
	f, err := symbolize.OpenFile(c.OpenPath)
	if err != nil {
		return nil, fmt.Errorf("read symbols of %s: %w", c.Path, err)
	}
	defer f.Close()

	pf := &probedFile{candidate: c, BuildID: f.BuildID()}
	type found struct {
		spec probeSpec
		sym  symbolize.Symbol
	}
	var funcs []found
	entries := make(map[uint64]bool)
	for _, s := range specs {
		// Lookup finds "cudaMalloc@@libcudart.so.12" by its bare name, and
		// only where the code is (not an executable's import of it).
		sym, ok := f.Lookup(s.Symbol)
		if !ok || sym.Value == 0 {
			continue
		}
		funcs = append(funcs, found{s, sym})
		if s.Prog == progCall {
			entries[sym.Value] = true
		}
	}
	for _, fn := range funcs {
		off, err := f.FileOffset(fn.sym.Value)
		if err != nil {
			return nil, fmt.Errorf("locate %s in %s: %w", fn.spec.Symbol, c.Path, err)
		}
		t := target{Spec: fn.spec, Offset: off}
		if fn.spec.Prog == progCall {
			// Its results are read at its return instructions: a function
			// whose returns cannot all be found is not probed, and the
			// report says so (Skipped).
			cf, err := callReturns(f, fn.sym, entries)
			if err != nil {
				pf.Skipped = append(pf.Skipped, fmt.Sprintf("%s: %v", fn.spec.Symbol, err))
				continue
			}
			t.Call = cf
		}
		pf.Targets = append(pf.Targets, t)
	}
	pf.Targets = append(pf.Targets, sites...)
	pf.Skipped = append(pf.Skipped, scopeSkipped...)
	if len(spec) > 0 {
		targets, skipped := specTargets(f, spec)
		pf.Targets = append(pf.Targets, targets...)
		pf.Skipped = append(pf.Skipped, skipped...)
	}
	if len(pf.Targets) == 0 && len(pf.Skipped) == 0 {
		return nil, nil
	}
	return pf, nil
}

// usdtTargets lists the block-layer USDT probe sites of a file (usdtProbes)
// whose arguments can be read. A file without notes has none.
func usdtTargets(f *elf.File) ([]target, error) {
	if f.Section(".note.stapsdt") == nil {
		return nil, nil
	}
	probes, err := usdt.Probes(f)
	if err != nil {
		return nil, err
	}
	var out []target
	for i := range probes {
		p := &probes[i]
		for _, want := range usdtProbes {
			if p.Provider != want.Provider || p.Name != want.Name || !usdtReadable(p, want.Kind) {
				continue
			}
			out = append(out, target{
				Spec:   probeSpec{Symbol: p.String(), API: want.API, Kind: want.Kind, Prog: progUSDT},
				Offset: p.Offset,
				USDT:   p,
			})
		}
	}
	return out, nil
}

// oomReportTargets lists the functions of oomReportProbes the file defines
// (not the ones it imports: libc10_cuda.so calls libc10.so's), as USDT
// sites at their entry. The dynamic string table is searched first, so a
// file that does not name them costs no symbol table decoding.
func oomReportTargets(f *elf.File) ([]target, error) {
	sec := f.Section(".dynstr")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	names, err := sec.Data()
	if err != nil {
		return nil, err
	}
	var syms []elf.Symbol
	var out []target
	for _, want := range oomReportProbes {
		if !bytes.Contains(names, []byte("\x00"+want.Symbol+"\x00")) {
			continue
		}
		if syms == nil {
			if syms, err = f.DynamicSymbols(); err != nil {
				return nil, err
			}
		}
		for _, s := range syms {
			if s.Name != want.Symbol || s.Section == elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
				continue
			}
			off, ok := elfFileOffset(f, s.Value)
			if !ok {
				continue // not in a loaded segment: nothing to probe
			}
			args, err := usdt.ParseArgs(want.Args)
			if err != nil {
				panic(err) // oomReportProbes' specs are valid
			}
			out = append(out, target{
				Spec:   probeSpec{Symbol: want.API.String(), API: want.API, Kind: event.KindAlloc, Prog: progUSDT},
				Offset: off,
				USDT:   &usdt.Probe{Provider: "c10", Name: want.API.String(), Args: args},
			})
		}
	}
	return out, nil
}

// elfFileOffset maps a virtual address to its file offset through the
// executable PT_LOAD segment holding it.
func elfFileOffset(f *elf.File, vaddr uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}

// usdtReadable reports whether the arguments a site's kind needs (the
// pointer; for an allocation also device, size and stream) are ones the
// BPF side can read.
func usdtReadable(p *usdt.Probe, kind event.Kind) bool {
	need := 1
	if kind == event.KindAlloc {
		need = 4
	}
	if len(p.Args) < need {
		return false
	}
	for _, a := range p.Args[:need] {
		if a.Kind == usdt.KindUnsupported {
			return false
		}
	}
	return true
}

// stringTablesMention reports whether any spec's name appears in the file's
// dynamic or static string table.
func stringTablesMention(f *elf.File, specs []probeSpec) bool {
	for _, name := range []string{".dynstr", ".strtab"} {
		sec := f.Section(name)
		if sec == nil || sec.Type == elf.SHT_NOBITS {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			continue
		}
		for _, s := range specs {
			// NUL on both sides: the whole name, not a part of a longer one.
			// Versioned names keep the bare name in .dynstr.
			if bytes.Contains(data, []byte("\x00"+s.Symbol+"\x00")) {
				return true
			}
		}
	}
	return false
}
