// Package snapshot reads and writes PyTorch CUDA memory snapshots: the
// pickles of torch.cuda.memory._snapshot() / _dump_snapshot(), which
// PyTorch's memory viewer (torch/utils/viz/MemoryViz.js) opens.
//
// # The format
//
// A snapshot is a pickled dict of plain values (dicts, lists, strings,
// ints, bools, None). Two generations exist:
//
//   - current (PyTorch 2.1+): {"segments": [...], "device_traces": [[...]
//     per device], "allocator_settings": {...}}. A segment has device,
//     address, total_size, allocated_size, active_size, requested_size,
//     stream, segment_type ("small"|"large"), segment_pool_id, is_expandable,
//     frames and blocks; blocks tile their segment in address order, each
//     with address, size, requested_size, state ("active_allocated",
//     "active_pending_free", "inactive") and frames. A trace entry has
//     action, addr (device_free for "oom"), size, stream, time_us and
//     frames. Frames are {filename, line, name}, innermost first.
//   - older (PyTorch 1.13-2.0): no device_traces; a block carries a
//     "history" of {addr, real_size, frames}, the last entry being its
//     current allocation.
//
// # Safety
//
// Unpickling in Python runs code; here nothing is ever executed. Decode
// first scans the opcode stream and refuses any opcode that names or calls a
// Python object (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ,
// persistent ids, extensions, out-of-band buffers) with ErrUnsafe, and any
// length that points past the end of the input with ErrMalformed, before
// any value is built. The unpickler's class resolver refuses every class as
// a second line of defence.
//
// # Memory
//
// A snapshot is mostly references: PyTorch shares frame dicts between
// tracebacks and a traceback between a block's entries, and the pickle
// memoizes them. Decoding keeps it that way. A small unpickler
// (unpickle.go) decodes the binary opcodes CPython's pickler writes,
// sizing each list and dict once; anything else goes to
// github.com/nlpodyssey/gopickle, which grows containers an item at a time.
// Trace entries are converted and dropped as they go, and equal tracebacks
// share one []Frame, found by the pickled list's identity, then by content.
// Importing takes about 7.7 times the file's size at its peak
// (BenchmarkImportMemory).
//
// A pickle built to take more is refused before anything is built: scan
// follows the stack by counts alone (bound.go) and refuses more than
// maxMarks marks open or maxStack values on the stack at once, a STOP that
// leaves more than the one value, and values that would take more than
// valueBound times the file (a memo index among them, checked before the
// memo grows to it); the conversion refuses a segment, block or trace
// entry dict used twice, which a reference repeated would otherwise
// multiply. Such pickles take at most about 6.5 times their size
// (TestImportMemoryHostile, TestImportMemoHostile). scan also counts the
// items of every list and dict, so that each is allocated once at its
// final size.
//
// # Events
//
// Read turns a snapshot into the event stream every vramprof source
// produces (see Snapshot.Records for the mapping), so `vramprof report
// snapshot.pickle` runs the same analysis as a recorded trace. Exporter goes
// the other way: fed a trace's records, it builds the Snapshot of one
// process (a snapshot is one allocator's; the recording's root process by
// default) that Encode writes as a protocol 2 pickle.
//
// Imports, besides the standard library: analysis/ledger, probes/event and
// github.com/nlpodyssey/gopickle.
package snapshot
