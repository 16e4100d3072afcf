// Package profile turns an analysis.Result into a pprof profile, readable by
// `go tool pprof` and every pprof front end.
//
// The profile follows Go's heap profiles: one sample per allocation class
// (stack, pid, device, API, layer, space, size), six values per sample in this
// order (the trace format and tools depend on it):
//
//	alloc_objects/count  alloc_space/bytes   every successful allocation
//	inuse_objects/count  inuse_space/bytes   live when the run ended
//	peak_objects/count   peak_space/bytes    live at the process's peak
//
// The default sample type is peak_space: the peak is what runs out of
// memory. String labels device ("unknown" for an unknown device), pid, api,
// layer, space and helper (when the stack went through a shared helper),
// and the numeric label bytes (the allocation size, unit
// bytes), keep the profile low-cardinality: never an address.
//
// The space label says what memory a sample holds: "device" (cudaMalloc,
// cuMemAlloc...), "physical" (cuMemCreate, by handle) or "host" (pinned host
// memory: cudaMallocHost, cuMemHostAlloc...). Device and physical samples
// together are the device memory of report.json's totals; host samples are
// another space, and their peak_* values are at the process's host peak, so
// they must not be summed with the others. Leave them out with
//
//	go tool pprof -tagignore=space=host profile.pb.gz
//
// (or keep only them with -tagfocus=space=host; -tagfocus=space=device keeps
// allocations but drops physical memory). Calls made inside another traced
// call (the cuMemAlloc_v2 inside a cudaMalloc) are not samples: each
// // allocation is in the profile once, under the API the program called.
//
// Stacks are leaf first and start at the stack's site
// (analysis.Stack.SiteFrame; see "Sites" in the analysis package): the
// frames leafward of it are left out, as Go's heap profiles leave out the
// runtime's malloc. Those are the CUDA call and the runtime and driver
// under it (the call is the api label), a caching allocator, FFI and
// interpreter glue (libffi, _ctypes, the eval loop), and a helper the
// process's other allocation stacks share (its function is the helper
// label: "dev_alloc"). So the flat column of `go tool pprof -top` names the
// place to fix, and
//
//	go tool pprof -top profile.pb.gz
//
// answers "who allocated the peak" (peak_space is the default). The full
// stacks, runtime frames included, are in report.json and report.html. A
// stack that was not captured becomes the single frame "[no stack]".
//
// Python's bracketed code names (<module>, <lambda>, <listcomp>) are
// renamed "<module name>.<name>" ("model.<module>" for model.py; the
// Function's SystemName keeps "<module>"): pprof's symbolizer takes a name
// with brackets for demangled C++, strips the "template arguments" and
// shows "<unknown>", merging every module's frame into one node.
//
// A PID reused during the run (one process exited, another got its PID) is
// two processes in the analysis and one pid label here: their samples sum
// under it. inuse_* of the process that ended is what it held when it
// ended; report.json's processes[] (start_ns) tells the two apart.
//
// The profile's comments always carry "lost_events: N", so a reader of the
// profile alone still learns that records were lost.
//
// github.com/google/pprof's profile package is imported as gprofile, since
// this folder is also named profile. The package neither reads nor changes
// anything but its arguments, and is safe for concurrent use on distinct
// or shared Results.
//
// Imports, besides the standard library: analysis, probes/event and
// github.com/google/pprof.
package profile
