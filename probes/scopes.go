//go:build linux

package probes

import (
	"bytes"
	"debug/elf"
	"fmt"
	"strings"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/symbolize"
	"github.com/vramprof/vramprof/probes/usdt"
)

// scopeProbes are framework allocator functions that give cached memory
// back in bulk (block layer): the cudaFree calls they make are the
// caller's release, but their stacks are walked deep in the allocator,
// where a library built without frame pointers cuts the walk short. Each is
// probed as a scope (analysis/scopes.go): usdt_block at its entry, as an
// allocation so that it walks the stack and reads all four arguments, and
// at each of its return instructions (returns.go), as a free; never a
// uretprobe. decodeRecord makes the records event.KindScopeBegin and
// event.KindScopeEnd by their API. Both carry rsp (the same at the entry
// and at a return), which pairs them; the entry also carries the return
// address at rsp, the caller, which a frame-pointer walk from a function's
// first instruction skips (appendFrames puts it back).
var scopeProbes = []struct {
	// Symbol is the function's mangled name, for files whose symbol tables
	// name it.
	Symbol string
	// Screen is a prefix some dynamic symbol of a file that defines the
	// function has: files without it are not looked at further.
	Screen string
	// Class is the typeinfo name of the class whose virtual function it
	// is, and Slots its vtable slot by the library's version (its soname's
	// suffix): how it is found in a stripped file (vtableMethod).
	Class string
	Slots map[string]int
	API   event.API
}{
	// c10/cuda/CUDACachingAllocator.cpp (libc10_cuda.so):
	//   void NativeCachingAllocator::emptyCache() override;
	// torch.cuda.empty_cache() -> torch._C._cuda_emptyCache ->
	// c10::cuda::CUDACachingAllocator::emptyCache() (inline: get()->emptyCache(),
	// through the CUDAAllocator vtable) lands here, the outermost function
	// of the release in the library; it loops over the devices'
	// DeviceCachingAllocator::emptyCache. In PyTorch 2.6 it is slot 13:
	// c10::Allocator's 6 (two destructors, allocate, is_simple_data_ptr,
	// raw_deleter, copy_data), then CUDAAllocator's raw_alloc,
	// raw_alloc_with_stream, raw_delete, init, initialized,
	// getMemoryFraction, setMemoryFraction, emptyCache (a call *0x68(%rax)
	// at the caller).
	{
		Symbol: "_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator10emptyCacheEv",
		Screen: "_ZN3c104cuda20CUDACachingAllocator",
		Class:  "N3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE",
		Slots:  map[string]int{"2.6": 13},
		API:    event.APIC10EmptyCache,
	},
}

// scopeArgs are the scope probes' USDT argument specs, by usdt_block's
// positions (0 Addr, 1 Device, 2 Size, 3 Stream): rsp, and at the entry
// the caller's return address in Size (decodeRecord moves it).
const (
	scopeBeginArgs = "8@%rsp -4@$-1 8@(%rsp) 8@$0"
	scopeEndArgs   = "8@%rsp"
)

// scopeTargets lists the scope probes of a file that defines one of
// scopeProbes' functions: its entry and its returns, returns first (an end
// without its begin is dropped; a begin whose end is not probed yet would
// stay open). A function whose returns cannot all be found is not probed,
// and says why in skipped.
func scopeTargets(ef *elf.File, c candidate) (targets []target, skipped []string, err error) {
	sec := ef.Section(".dynstr")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, nil, nil
	}
	names, err := sec.Data()
	if err != nil {
		return nil, nil, err
	}
	var f *symbolize.File
	for _, want := range scopeProbes {
		if !bytes.Contains(names, []byte("\x00"+want.Screen)) {
			continue
		}
		if f == nil {
			if f, err = symbolize.OpenFile(c.OpenPath); err != nil {
				return nil, nil, fmt.Errorf("read symbols of %s: %w", c.Path, err)
			}
			defer f.Close()
		}
		sym, err := scopeFunction(f, want.Symbol, want.Class, want.Slots)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", want.API, err))
			continue
		}
		cf, err := callReturns(f, sym, nil)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", want.API, err))
			continue
		}
		entry, err := f.FileOffset(sym.Value)
		if err != nil {
			return nil, nil, fmt.Errorf("locate %s in %s: %w", want.API, c.Path, err)
		}
		for _, r := range cf.Returns {
			targets = append(targets, scopeTarget(want.API, event.KindFree, r.Offset, scopeEndArgs))
		}
		targets = append(targets, scopeTarget(want.API, event.KindAlloc, entry, scopeBeginArgs))
	}
	return targets, skipped, nil
}

// scopeFunction finds a scope function: by its symbol when a symbol table
// of the file names it with a size, else through its class's vtable, at
// the slot the library's version has it in, delimited by its FDE.
func scopeFunction(f *symbolize.File, name, class string, slots map[string]int) (symbolize.Symbol, error) {
	if sym, ok := f.Lookup(name); ok && sym.Value != 0 && sym.Size > 0 {
		return sym, nil
	}
	ef := f.ELF()
	soname, _ := ef.DynString(elf.DT_SONAME)
	version := ""
	if len(soname) > 0 {
		if _, v, ok := strings.Cut(soname[0], ".so."); ok {
			version = v
		}
	}
	slot, ok := slots[version]
	if !ok {
		return symbolize.Symbol{}, fmt.Errorf("no symbol, and its vtable slot in version %q (soname %v) is not known", version, soname)
	}
	addr, err := vtableMethod(ef, class, slot)
	if err != nil {
		return symbolize.Symbol{}, err
	}
	size, err := fdeExtent(ef, addr)
	if err != nil {
		return symbolize.Symbol{}, err
	}
	return symbolize.Symbol{Name: name, Value: addr, Size: size, Func: true}, nil
}

// scopeTarget is one scope probe: usdt_block at a file offset, without a
// semaphore.
func scopeTarget(api event.API, kind event.Kind, off uint64, spec string) target {
	args, err := usdt.ParseArgs(spec)
	if err != nil {
		panic(err) // scopeBeginArgs and scopeEndArgs are valid
	}
	return target{
		Spec:   probeSpec{Symbol: api.String(), API: api, Kind: kind, Prog: progUSDT},
		Offset: off,
		USDT:   &usdt.Probe{Provider: "c10", Name: api.String(), Args: args},
	}
}

// scopeEnd reports whether t is a scope function's return instruction
// (scopeTargets), not a function of its own.
func (t *target) scopeEnd() bool {
	return t.Spec.Prog == progUSDT && t.Spec.Kind == event.KindFree && t.Spec.API == event.APIC10EmptyCache
}
