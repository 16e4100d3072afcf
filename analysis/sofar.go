package analysis

// SoFar returns the Result of the stream so far, as Finish would if the
// stream ended now (cut short: Run.Ended false unless an End record came),
// and leaves the Analyzer open for more records: `vramprof serve` reads a
// live process's figures and profiles this way while it runs. The Result is
// fresh on every call and shares nothing the Analyzer goes on changing.
// After Finish it returns Finish's Result. It costs what Finish costs
// (findings included): call it when asked for figures, not per record.
func (a *Analyzer) SoFar() *Result {
	if a.finished {
		return a.result
	}
	// Finish only reads the model (the lazily created per-key states it
	// touches are the ones Add would create) and recomputes what it sets
	// (loops, procIndex): reopening it afterwards is safe.
	// TestSnapshotLeavesTheStreamOpen holds it to that.
	r := a.Finish()
	a.finished, a.result = false, nil
	return r
}
