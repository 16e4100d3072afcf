// Package python is the user-space half of vramprof's Python stacks: it
// finds the CPython interpreter in a live process, gives the BPF frame
// walker the byte offsets it needs for that interpreter's version, and
// turns the raw frames the walker records into function, file and line.
//
// The walker (bpf/) starts at _PyRuntime, follows the interpreter and
// thread-state lists to the calling thread, then the chain of frames, and
// records per frame two u64s: the code object pointer and an instruction
// word (the frame's instruction value in the low 56 bits, the raw byte at
// the frame's owner/is_entry offset in the top 8). Nothing there
// dereferences a code object; that happens here, lazily and cached, by
// reading /proc/PID/mem:
//
//   - Find locates the interpreter (the executable or a mapped
//     libpython3.X.so that defines _PyRuntime), its version and run-time
//     addresses, and the Layout: from the tables in layout.go for 3.10 to
//     3.12, from the interpreter's own _Py_DebugOffsets for 3.13 and 3.14.
//   - Layout.Boundary reads the owner byte: which frames are C-stack shims
//     and where one _PyEval_EvalFrameDefault call's frames end, for merging
//     with native frames.
//   - Resolver checks each code object (its type must be the process's
//     PyCode_Type, its strings PyUnicode_Type) before trusting it, decodes
//     its names, and computes the line from its line table exactly as
//     CPython's PyFrame_GetLineNumber does (linetable.go).
//
// Supported: CPython 3.10 to 3.14, x86-64, release (non-debug) builds with
// the GIL. Free-threaded builds are refused (ErrUnsupported).
//
// Imports, besides the standard library: probes/event and probes/symbolize.
package python
