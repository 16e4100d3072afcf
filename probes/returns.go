//go:build linux

package probes

import (
	"fmt"
	"slices"

	"github.com/vramprof/vramprof/probes/allocspec"
	"github.com/vramprof/vramprof/probes/symbolize"
)

// Where a probed function returns. vramprof attaches no uretprobe: a
// uretprobe replaces the return address on the stack with the kernel's
// trampoline, a C++ exception thrown through the function cannot unwind
// past it (the process dies in std::terminate), and kernels 6.11+ return
// from it through the uretprobe system call, which strict seccomp profiles
// refuse. call_return is an ordinary uprobe on each return instruction
// instead, found by disassembly; rsp there is rsp at the entry, which is
// how BPF pairs the two (bpf/vramprof/calls.h).

// maxTailHops bounds how far chains of tail calls are followed (f jumps
// to g, which jumps to h...), and maxTailFuncs how many functions one
// probed function's returns may gather: compilers chain a few, and a
// function whose exits spread further is not probed.
const (
	maxTailHops  = 4
	maxTailFuncs = 16
)

// callFunc is where a probed CUDA function (progCall) returns.
type callFunc struct {
	// Returns are the file offsets of its return instructions, and of
	// those of the functions it tail-calls (Own false: the instruction
	// also returns from calls of those functions, which BPF tells apart
	// by rsp).
	Returns []callReturn
	// TailCalls: it jumps to another function this file probes: that
	// one's entry, at the same rsp, is nested in it.
	TailCalls bool
}

// callReturn is one return instruction a probed function can leave by.
type callReturn struct {
	Offset uint64
	Own    bool // in the function's own code
}

// callReturns finds where the function sym returns: its own return
// instructions (of the symbol, and of GCC's "name.cold" part), and,
// through direct tail calls, those of the functions it jumps to, which the
// symbol table must delimit. entries are the addresses of the functions
// the file probes, to say whether a tail call reaches one. It fails when
// the symbol has no size, or a jump leaves the code for an unknown place
// (through a register or memory, to a PLT stub or code of no sized
// symbol): a return could then be missed, and the function must not be
// probed (an allocation seen without its result is no allocation).
func callReturns(f *symbolize.File, sym symbolize.Symbol, entries map[uint64]bool) (*callFunc, error) {
	cf := &callFunc{}
	seen := map[uint64]bool{sym.Value: true}
	type hop struct {
		sym   symbolize.Symbol
		depth int
	}
	queue := []hop{{sym, 0}}
	for len(queue) > 0 {
		h := queue[0]
		queue = queue[1:]
		rets, tails, err := functionExits(f, h.sym)
		if err != nil {
			if h.sym.Value == sym.Value {
				return nil, err
			}
			return nil, fmt.Errorf("its tail call to %s: %w", h.sym.Name, err)
		}
		for _, r := range rets {
			off, err := f.FileOffset(r)
			if err != nil {
				return nil, err
			}
			cf.Returns = append(cf.Returns, callReturn{Offset: off, Own: h.depth == 0})
		}
		for _, t := range tails {
			if seen[t.Target] {
				continue
			}
			callee, ok := f.SymbolAt(t.Target)
			if !ok || callee.Value != t.Target || callee.Size == 0 {
				return nil, fmt.Errorf("%w at %#x: to %#x, not the start of a function of known size", allocspec.ErrTailCall, t.At, t.Target)
			}
			if h.depth+1 > maxTailHops || len(seen) >= maxTailFuncs {
				return nil, fmt.Errorf("%w at %#x: tail calls chained deeper than %d functions", allocspec.ErrTailCall, t.At, maxTailHops)
			}
			seen[t.Target] = true
			cf.TailCalls = cf.TailCalls || entries[t.Target]
			queue = append(queue, hop{callee, h.depth + 1})
		}
	}
	slices.SortFunc(cf.Returns, func(a, b callReturn) int {
		switch {
		case a.Offset < b.Offset:
			return -1
		case a.Offset > b.Offset:
			return 1
		}
		return 0
	})
	return cf, nil
}

// functionExits disassembles a function (and the part GCC split off as
// "name.cold", when there is one) and returns the addresses of its return
// instructions and its jumps out.
func functionExits(f *symbolize.File, sym symbolize.Symbol) ([]uint64, []allocspec.Tail, error) {
	parts, err := functionCode(f, sym)
	if err != nil {
		return nil, nil, err
	}
	return allocspec.Exits(parts...)
}

// functionCode reads a function's code: its symbol's extent, and that of
// its "name.cold" part when there is one.
func functionCode(f *symbolize.File, sym symbolize.Symbol) ([]allocspec.Code, error) {
	if sym.Size == 0 {
		return nil, fmt.Errorf("its symbol has no size: its code cannot be delimited")
	}
	code, err := readCode(f, sym.Value, sym.Size)
	if err != nil {
		return nil, err
	}
	parts := []allocspec.Code{{Addr: sym.Value, Bytes: code}}
	if cold, ok := f.Lookup(sym.Name + ".cold"); ok && cold.Size > 0 {
		if code, err := readCode(f, cold.Value, cold.Size); err == nil {
			parts = append(parts, allocspec.Code{Addr: cold.Value, Bytes: code})
		}
	}
	return parts, nil
}
