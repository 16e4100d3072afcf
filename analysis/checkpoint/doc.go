// Package checkpoint follows an event stream for a flight recorder
// (vramprof run --max-trace) and writes what each new segment opens with:
// an event.Checkpoint summarising every event before it, and the events of
// the allocations still live then, flagged event.FlagRestored, which a
// reader takes as any allocation (analysis/flight.go restores the rest).
//
// What is live is decided by analysis/ledger, the one model of live GPU
// memory the analysis reads too: a [Tracker] drives a ledger.Ledger and
// keeps beside it only what a checkpoint needs that the ledger does not
// hold (the events to restore, the per-API books, the per-scope counts,
// peaks and live sets at the peaks, the timelines), so that a report made
// from a checkpoint agrees with the whole stream's. The record type and
// its encoding are the trace format's (probes/event).
//
// Imports, besides the standard library: analysis/ledger and probes/event.
package checkpoint
