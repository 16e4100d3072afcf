package report

import (
	"fmt"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report/units"
)

// growthRate renders a leak's (or a pinned host growth's) rate in one
// phrase, under the projection rule of analysis (doc.go, "Rates and
// projections"): per second, minute or hour when at least that long was
// observed; else per iteration when the process has a loop; else the
// plain observation, "+60.00 MiB over 38.5 ms", with nothing extrapolated.
func growthRate(l *analysis.Leak) string {
	rate, observed := l.BytesPerSecondObserved()
	if b, ok := analysis.RateBaseFor(observed); ok {
		return units.Rate(rate*float64(b.Ns)/1e9, b.Name)
	}
	if l.Iterations > 0 {
		return units.Rate(l.BytesPerIteration, "iteration")
	}
	return fmt.Sprintf("+%s over %s", units.Bytes(l.GrowthBytes), units.Duration(l.To-l.From))
}

// windowsText states a growth finding's detection windows, its evidence:
// "+102252544 bytes (97.52 MiB) from +148 ms to +163 ms".
func windowsText(res *analysis.Result, l *analysis.Leak) string {
	return fmt.Sprintf("+%d bytes (%s) from %s to %s", l.WindowGrowthBytes, units.Bytes(l.WindowGrowthBytes),
		secs(res, l.WindowStart), secs(res, l.WindowEnd))
}
