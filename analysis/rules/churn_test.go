package rules

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vramprof/vramprof/analysis/finding"
)

// TestChurnSeverity: medium for a cache released and refilled in at least
// every other iteration, or cycles costing 1% of the run; info for a
// release every many steps at a low cost, whatever its run's length.
func TestChurnSeverity(t *testing.T) {
	loop := func(n uint64) *Loop { return &Loop{Count: n, PeriodNs: 5e6} }
	tests := []struct {
		name  string
		churn finding.Churn
		loop  *Loop
		want  finding.Severity
	}{
		// b_churn: every step of 40 takes back what the last released.
		{"every step", finding.Churn{Cycles: 156, Releases: 39, CostMsPerSecond: 2}, loop(40), finding.SeverityMedium},
		{"every other step", finding.Churn{Cycles: 60, Releases: 20, CostMsPerSecond: 2}, loop(40), finding.SeverityMedium},
		// h_empty_cache_periodic: a release after each evaluation, every 25
		// of 75 steps (2 refilled, 7 cycles); 0.80-0.95 ms per second
		// measured on a 0.35 s run, 3 here as on a loaded host.
		{"every 25 steps", finding.Churn{Cycles: 7, Releases: 3, CostMsPerSecond: 3}, loop(75), finding.SeverityInfo},
		// The same habit on a run 100 times longer: more cycles, same share.
		{"every 25 steps, long run", finding.Churn{Cycles: 700, Releases: 300, CostMsPerSecond: 3}, loop(7500), finding.SeverityInfo},
		{"costly without a loop", finding.Churn{Cycles: 5, Releases: 5, CostMsPerSecond: 10}, nil, finding.SeverityMedium},
		{"cheap without a loop", finding.Churn{Cycles: 50, Releases: 50, CostMsPerSecond: 9.9}, nil, finding.SeverityInfo},
		{"caching off", finding.Churn{Cycles: 500, Releases: 500, CostMsPerSecond: 50, CachingOff: true}, loop(500), finding.SeverityInfo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.churn
			v := &View{Processes: []*Process{{PID: 7, Churn: &c, Pooled: true, Loop: tt.loop}}}
			fs := Churn(v)
			if assert.Len(t, fs, 1) {
				assert.Equal(t, tt.want, fs[0].Severity)
				assert.Equal(t, c.CycleBytes, fs[0].Bytes)
			}
		})
	}
	// Too few cycles, or no cache traced: no finding.
	few := finding.Churn{Cycles: 2, Releases: 2, CostMsPerSecond: 50}
	assert.Empty(t, Churn(&View{Processes: []*Process{{Churn: &few, Pooled: true}}}))
	many := finding.Churn{Cycles: 50, Releases: 50, CostMsPerSecond: 50}
	assert.Empty(t, Churn(&View{Processes: []*Process{{Churn: &many}}}))
}
