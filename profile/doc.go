// Package profile turns an analysis.Result into a pprof profile, readable by
// `go tool pprof` and every pprof front end.
//
// The profile follows Go's heap profiles: one sample per allocation class
// (stack, pid, device, API, layer, size), six values per sample in this
// order (the trace format and tools depend on it):
//
//	alloc_objects/count  alloc_space/bytes   every successful allocation
//	inuse_objects/count  inuse_space/bytes   live when the run ended
//	peak_objects/count   peak_space/bytes    live at the process's peak
//
// The default sample type is peak_space: the peak is what runs out of
// memory. String labels device ("unknown" for an unknown device), pid, api
// and layer, and the numeric label bytes (the allocation size, unit bytes),
// keep the profile low-cardinality: never an address. Stacks are leaf first
// and keep the CUDA runtime's own frames (pprof's -hide can drop them). A
// stack that was not captured becomes the single frame "[no stack]".
//
// The profile's comments always carry "lost_events: N", so a reader of the
// profile alone still learns that records were lost.
//
// This package imports analysis, probes/event and github.com/google/pprof
// (aliased gprofile, since this folder is also named profile); it neither
// reads nor changes anything but its arguments, and is safe for concurrent
// use on distinct or shared Results.
package profile
