package status

import (
	"fmt"
	"strings"
	"time"

	"github.com/vramprof/vramprof/report/units"
)

// Figures are the numbers one status line shows.
type Figures struct {
	Elapsed time.Duration
	Events  uint64  // records traced so far
	Rate    float64 // events per second over the last interval
	Live    uint64  // device bytes live now (segment layer)
	Peak    uint64  // the most device bytes live at once so far
	Lost    uint64
	Procs   int64 // processes traced now
	// NVMLUsed is the device memory NVML last reported used, summed over
	// devices; shown only when NVMLSeen.
	NVMLUsed uint64
	NVMLSeen bool
}

// Format renders one status line, without prefix or line ending:
//
//	12.5s  8160 events (650/s)  live 1.50 GiB  peak 2.00 GiB  lost 0  1 process  NVML used 3.10 GiB
func Format(f Figures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %d events (%s)  live %s  peak %s  lost %d  %d process",
		elapsedText(f.Elapsed), f.Events, rateText(f.Rate),
		units.Bytes(f.Live), units.Bytes(f.Peak), f.Lost, f.Procs)
	if f.Procs != 1 {
		b.WriteString("es")
	}
	if f.NVMLSeen {
		fmt.Fprintf(&b, "  NVML used %s", units.Bytes(f.NVMLUsed))
	}
	return b.String()
}

// elapsedText renders a run's age: "0.5s", "59.9s", "2m05s", "1h02m05s".
func elapsedText(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Truncate(100*time.Millisecond).Seconds())
	}
	s := int64(d / time.Second)
	if s < 3600 {
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm%02ds", s/3600, s/60%60, s%60)
}

// rateText renders events per second: "0/s", "650/s", "12.3k/s", "1.5M/s".
func rateText(r float64) string {
	switch {
	case r < 999.5:
		return fmt.Sprintf("%.0f/s", r)
	case r < 999.5e3:
		return fmt.Sprintf("%.1fk/s", r/1e3)
	default:
		return fmt.Sprintf("%.1fM/s", r/1e6)
	}
}
