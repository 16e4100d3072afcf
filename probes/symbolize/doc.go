// Package symbolize turns the raw user-stack addresses captured in BPF into
// native frames (function, file, line) and the executable mappings they lie
// in, and finds the functions the prober attaches to.
//
// Three layers, each usable on its own:
//
//   - ParseMaps and ReadMaps read /proc/PID/maps: which file is mapped where.
//   - File is one ELF object: its .symtab and .dynsym symbols (versions split
//     off, so "cudaMalloc@@libcudart.so.12" is found as "cudaMalloc"), its GNU
//     build ID, the program headers that relate file offsets to virtual
//     addresses, C++/Rust demangling, and DWARF file:line loaded lazily on the
//     first line lookup. The attach side uses File.Lookup and File.FileOffset.
//   - Symbolizer caches Files and per-process maps, resolves stacks for many
//     processes, and hands out each Mapping once so the recorder writes it to
//     the trace once.
//
// Files of a target are opened through /proc/PID/root, so processes in other
// mount namespaces (containers) resolve against their own files.
//
// Frame pointers and addresses follow the BPF contract: element 0 of a stack
// is the probed function's entry address; the rest are return addresses,
// which point after a call instruction and are looked up one byte earlier so
// that a call at the very end of a function resolves to that function.
//
// Imports, besides the standard library: probes/event and
// github.com/ianlancetaylor/demangle.
package symbolize
