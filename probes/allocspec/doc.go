// Package allocspec describes framework allocators that carry no USDT
// probes (JAX/XLA's BFC allocator, RAPIDS RMM pools, a project's own pool)
// so their blocks can be traced as the block layer: which library holds
// them, which functions allocate and free, and where the pointer and the
// size are.
//
// A spec names functions by their demangled C++ names (globs), and every
// probe it leads to is an entry probe: a function's result is read by plain
// uprobes placed on its return instructions (Returns finds them), never by
// a uretprobe, because a C++ exception cannot unwind through the uretprobe
// trampoline and the process would terminate.
//
// The package is pure Go (the standard library, a demangler and an x86
// decoder): parsing, matching and disassembly are testable without a
// kernel.
//
// Imports, besides the standard library: golang.org/x/arch.
package allocspec
