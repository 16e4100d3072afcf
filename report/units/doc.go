// Package units renders byte counts, durations and rates for people: the
// one formatter behind every output (the finding summaries written by
// analysis, the text, Markdown and HTML reports, check's verdicts and
// diff). The exact integers stay next to these forms in every output
// (BytesExact, DeltaExact); report.json keeps them raw. It also parses the
// sizes people type on the command line (ParseSize).
//
// It imports the standard library only, so that analysis, report and the
// commands can all use it without an import cycle. Its functions are pure
// and safe for concurrent use.
package units
