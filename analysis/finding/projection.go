package finding

// ProjectionFactor bounds every projection (see doc.go, "Rates and
// projections"): a figure is projected at most this many times as far as
// the span it was observed over. A run that saw 6 s of growth may say when
// a device fills within a minute, not within a day: the loop may end, the
// cache may cap, and a rate is only evidence for about as long as it was
// watched.
const ProjectionFactor = 10

// RateBase is a time base for a rate: "second", "minute" or "hour".
type RateBase struct {
	Name string
	Ns   uint64
}

// rateBases, longest first.
var rateBases = []RateBase{{"hour", 3600e9}, {"minute", 60e9}, {"second", 1e9}}

// RateBaseFor returns the longest time base not longer than observedNs, the
// span a rate was measured over; false when that span is under a second
// (such a rate is quoted per iteration, or as growth over the span).
func RateBaseFor(observedNs uint64) (RateBase, bool) {
	for _, b := range rateBases {
		if observedNs >= b.Ns {
			return b, true
		}
	}
	return RateBase{}, false
}

// Projectable reports whether a projection horizonSeconds ahead stays
// within ProjectionFactor times observedNs.
func Projectable(horizonSeconds float64, observedNs uint64) bool {
	return horizonSeconds >= 0 && horizonSeconds*1e9 <= ProjectionFactor*float64(observedNs)
}

// BytesPerSecondObserved is the growth rate the leak's texts quote, with
// the span it was measured over: with a loop, the rate per iteration over
// the period, observed over the iterations; else the windows' rate over
// their span.
func (l *Leak) BytesPerSecondObserved() (rate float64, observedNs uint64) {
	if l.Iterations > 0 && l.PeriodNs > 0 {
		return l.BytesPerIteration * 1e9 / float64(l.PeriodNs), l.Iterations * l.PeriodNs
	}
	return l.BytesPerSecond, l.WindowEnd - l.WindowStart
}

// TimeToOOMProjectable reports whether the projected time to
// out-of-memory is within the projection rule: a capacity is known and
// the time is at most ProjectionFactor times the span the rate was
// observed over.
func (l *Leak) TimeToOOMProjectable() bool {
	if l.CapacityBytes == 0 {
		return false
	}
	_, obs := l.BytesPerSecondObserved()
	return Projectable(l.TimeToOOMSeconds, obs)
}
