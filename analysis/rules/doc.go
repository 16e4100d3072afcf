// Package rules holds the rules that turn a finished analysis into
// findings: leaks, the cache's growth, spikes, churn, fragmentation, OOM
// forensics, pinned host growth and device imbalance, one file each. A
// rule is a function of a View, the narrow, documented part of the model
// the rules read (view.go), and returns finding.Finding values; it keeps
// no state. The Analyzer builds the View at Finish (analysis/view.go) and
// runs All; package analysis's doc (doc.go there) states each rule's
// reasoning, and cmd/vramprof's corpus tests (corpus_rules_e2e_test.go)
// hold each one to a labelled corpus.
//
// To add a rule: write a function func(*View) []finding.Finding in a file
// of its own, add it to All with the kinds it returns, and add its corpus
// test. If it needs a figure the View lacks, add the field to View with
// its meaning (units, layer, per process or device) and fill it in
// analysis/view.go.
//
// Imports, besides the standard library: analysis/finding and probes/event.
package rules
