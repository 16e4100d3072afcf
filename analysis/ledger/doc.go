// Package ledger is the one model of live GPU memory: process instances,
// the live allocations of every instance, layer and memory space, and the
// levels and peaks they make, per key space and all processes together.
//
// The rules that decide what is live live here only: a failed call is
// never live; an allocation at an address already live in its key space
// replaces the old one (its free was missed); physical memory (cuMemCreate)
// stays live after cuMemRelease until its last mapping is unmapped; a
// Process record for a PID whose instance already had events starts a new
// instance, and the old one's memory leaves the all-process levels (the
// driver freed it at exit or exec) while its own levels stay.
//
// The analysis drives the ledger call by call (Alloc, Free, Create,
// Release, Map, Unmap, Process, Active) and keeps its aggregates beside it;
// the PyTorch snapshot exporter keeps its per-segment detail beside it; the
// flight recorder's tracker (analysis/checkpoint) drives it as the
// analysis does, keeping the events it restores beside it (Entry.Tag,
// TagMapping) and forgetting superseded instances (Forget); the live
// status line only reads levels after Apply.
//
// Imports, besides the standard library: probes/event.
package ledger
