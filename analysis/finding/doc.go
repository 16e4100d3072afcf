// Package finding holds what the analysis concludes and the model facts
// those conclusions quote: Finding with its evidence kinds, Severity, the
// finding kinds, and the result types a finding carries (Usage, OOM, Pool,
// Leak, Churn...). Package analysis builds them and re-exports every name
// (analysis/aliases.go); package analysis/rules returns them; package
// report words them. It holds data and the ordering of findings only: no
// rule and no model.
//
// Imports, besides the standard library: probes/event.
package finding
