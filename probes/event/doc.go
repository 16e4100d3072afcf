// Package event holds the one event type every vramprof source emits (live
// probes, trace replay, snapshot import) and the .vpt trace format that
// records a stream of them on disk.
//
// A stream is a sequence of [Record] values: one [Header] first, then
// [Event]s interleaved with the rarer [Stack], [Mapping], [Process],
// [Library] and [Lost] records that events refer to, the device layer's
// [DeviceInfo], [Sample] and [NVMLStatus] records from the NVML sampler,
// [TestPhase] records saying which pytest test a process runs (in effect
// order with its events), and an [End] when the recording stopped cleanly. A record that others refer to (a Stack, a
// Mapping) always comes before its first use, so a stream can be consumed in
// one pass.
//
// [Writer] streams records to disk as they arrive; [Reader] replays them. The
// byte layout and its compatibility rules are described at the top of
// trace.go. Replaying a trace yields exactly the records that were written,
// field for field, so every output computed from a replay is byte-identical
// to the one computed live.
//
// A flight recorder (vramprof run --max-trace) keeps a stream as rotating
// segments, each a stream of its own: it opens each new segment with a
// [Checkpoint] of everything before it (totals, the live set at each peak,
// timelines) and the allocations still live then, flagged [FlagRestored],
// so that a reader may start at any segment. Each segment's header is
// followed by its [Identity] (the recording's random ID, the segment's
// number, and the record count and chained checksum the segment before it
// ended with: [Writer.Frames], [Writer.Sum]), so that a reader tells a
// gap, a cut, a foreign or a repeated segment from the segments of one
// recording. The record and its encoding
// are here; the tracker that follows a stream to write one is
// analysis/checkpoint's, on the model of live memory (analysis/ledger).
//
// It imports nothing but the standard library, so that analysis, profile
// and report can depend on it without pulling in BPF or NVML.
//
// Imports, besides the standard library: nothing.
package event
