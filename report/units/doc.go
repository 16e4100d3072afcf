// Package units renders byte counts, durations and rates for people: the
// one formatter behind every output (the finding summaries report words
// from analysis's facts, the text, Markdown and HTML reports, check's
// verdicts and diff, the live status line). The exact integers stay next to
// these forms in every output (BytesExact, DeltaExact); report.json keeps
// them raw. It also parses the sizes people type on the command line
// (ParseSize). analysis does not use it: it formats no byte count, duration
// or rate for people.
//
// It imports nothing but the standard library, so that report and the
// commands can both use it without an import cycle. Its functions are pure and safe
// for concurrent use.
//
// Imports, besides the standard library: nothing.
package units
