// Package status draws the live status line of a recording: `vramprof run`
// and `attach` show it on stderr while they trace.
//
// Live follows the device memory live in the traced processes as the
// records go to the trace, with the analysis's own model (analysis/ledger),
// and NVML's latest figures; Format renders one line of Figures; Line draws
// the line until stopped: on a terminal redrawn in place twice a second
// (or, when the traced command shares the terminal, on the bottom row
// below a scroll region), elsewhere a plain line every PlainEvery.
//
// The figures here are for the eye only: the outputs come from a replay
// of the trace (cmd/vramprof/internal/recorder), never from this package.
// It imports neither cilium/ebpf nor go-nvml: the session's counters come
// through a callback.
//
// Imports, besides the standard library: analysis/ledger, probes/event,
// report/units and golang.org/x/term.
package status
