//go:build linux

package probes

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ianlancetaylor/demangle"

	"github.com/vramprof/vramprof/probes/allocspec"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/symbolize"
	"github.com/vramprof/vramprof/probes/usdt"
)

// specFunc is a function an allocator spec names, found in a file: what
// spec_enter and spec_return read there.
type specFunc struct {
	Args bpfUsdtSpec // args[0] the pointer, args[2] the size
	// AtReturn: the pointer is the result, read by spec_return at each of
	// Returns (file offsets of the function's return instructions).
	AtReturn bool
	Returns  []uint64
}

// specAllocators returns the specs whose library globs match the file's
// base name.
func specAllocators(path string, all []allocspec.Allocator) []*allocspec.Allocator {
	base := filepath.Base(path)
	var out []*allocspec.Allocator
	for i := range all {
		if all[i].MatchLibrary(base) {
			out = append(out, &all[i])
		}
	}
	return out
}

// specTargets finds the functions the allocators name in an ELF file. A
// function whose result is needed but whose return instructions cannot all
// be found (a tail call, an indirect jump, code that does not decode, no
// size) is not probed: skipped says which and why, one line each, for the
// report. Each function is probed once, whatever aliases name its code.
func specTargets(f *symbolize.File, allocs []*allocspec.Allocator) (targets []target, skipped []string) {
	seen := make(map[uint64]bool)
	for _, a := range allocs {
		for i := range a.Functions {
			fn := &a.Functions[i]
			// The mangled name holds the function's own identifier as
			// written: a cheap screen before demangling.
			ident := patternIdent(fn.Pattern)
			for _, sym := range f.Symbols(func(name string) bool { return strings.Contains(name, ident) }) {
				if !sym.Func || sym.Value == 0 || seen[sym.Value] {
					continue
				}
				name := sym.Name // a C function's name is its symbol
				if strings.HasPrefix(name, "_Z") {
					d, err := demangle.ToString(name)
					if err != nil {
						continue
					}
					name = d
				}
				if !fn.Match(name) {
					continue
				}
				seen[sym.Value] = true
				t, err := specTarget(f, a, fn, sym, name)
				if err != nil {
					skipped = append(skipped, fmt.Sprintf("%s (%s): %v", name, a.Name, err))
					continue
				}
				targets = append(targets, t)
			}
		}
	}
	return targets, skipped
}

// patternIdent is the last plain identifier before a pattern's parameter
// list ("AllocateRaw" in "*::BFCAllocator::AllocateRaw(...)"), or "" when
// a glob character is part of it.
func patternIdent(p string) string {
	name, _, _ := strings.Cut(p, "(")
	if i := strings.LastIndex(name, "::"); i >= 0 {
		name = name[i+2:]
	}
	if strings.ContainsAny(name, "*?<> ") {
		return ""
	}
	return name
}

func specTarget(f *symbolize.File, a *allocspec.Allocator, fn *allocspec.Function, sym symbolize.Symbol, name string) (target, error) {
	off, err := f.FileOffset(sym.Value)
	if err != nil {
		return target{}, err
	}
	api, kind := event.APISpecAlloc, event.KindAlloc
	if fn.Role == allocspec.RoleFree {
		api, kind = event.APISpecFree, event.KindFree
	}
	sf := &specFunc{Args: specArgs(fn), AtReturn: fn.AtReturn()}
	if sf.AtReturn {
		rets, err := returnSites(f, sym)
		if err != nil {
			return target{}, err
		}
		for _, r := range rets {
			ro, err := f.FileOffset(r)
			if err != nil {
				return target{}, err
			}
			sf.Returns = append(sf.Returns, ro)
		}
	}
	return target{
		Spec:   probeSpec{Symbol: name, API: api, Kind: kind, Prog: progSpec},
		Offset: off,
		Func:   sf,
	}, nil
}

// returnSites returns the addresses of a function's return instructions
// (see functionCode for its parts): a spec'd function is probed only when
// its code holds all of them (no tail call).
func returnSites(f *symbolize.File, sym symbolize.Symbol) ([]uint64, error) {
	parts, err := functionCode(f, sym)
	if err != nil {
		return nil, err
	}
	return allocspec.Returns(parts...)
}

// readCode reads size bytes of the file's code at a virtual address.
func readCode(f *symbolize.File, vaddr, size uint64) ([]byte, error) {
	buf, err := f.ReadVirtual(vaddr, size)
	if errors.Is(err, symbolize.ErrNotLoaded) {
		return nil, fmt.Errorf("code at %#x (%d bytes) is not in a loaded segment", vaddr, size)
	}
	if err != nil {
		return nil, fmt.Errorf("read code at %#x: %w", vaddr, err)
	}
	return buf, nil
}

// argRegs are the System V x86-64 integer argument registers, arg1 to arg6.
var argRegs = [...]string{"%rdi", "%rsi", "%rdx", "%rcx", "%r8", "%r9"}

// specArgs lays out where a function's pointer and size are, in the BPF
// contract's struct usdt_spec (args[0] the pointer, args[2] the size, the
// positions usdt_block reads too), as the USDT argument specs a compiler
// would write for them: arg1-arg6 are registers, arg7 and up the stack
// slots above the return address at entry. A result (ret) is not read
// from the spec: spec_return takes rax.
func specArgs(fn *allocspec.Function) bpfUsdtSpec {
	loc := func(l allocspec.Loc) usdt.Arg {
		var s string
		switch {
		case l.Arg >= 1 && l.Arg <= len(argRegs):
			s = "8@" + argRegs[l.Arg-1]
		case l.Arg > len(argRegs):
			s = fmt.Sprintf("8@%d(%%rsp)", 8*(l.Arg-len(argRegs)))
		default:
			return usdt.Arg{} // none: reads as 0
		}
		a, err := usdt.ParseArg(s)
		if err != nil {
			panic(err) // the strings above are valid specs
		}
		return a
	}
	p := &usdt.Probe{Args: []usdt.Arg{loc(fn.Ptr), {}, loc(fn.Size), {}}}
	return usdtSpec(p)
}
