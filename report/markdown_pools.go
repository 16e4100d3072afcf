package report

import (
	"fmt"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report/units"
)

// writePoolsMarkdown writes the block layer's sections: fragmentation per
// process and device (the worst moment, each failed segment allocation and
// the end) and the segment churn of those processes. Nothing when no block
// layer was traced.
func writePoolsMarkdown(p func(string, ...any), res *analysis.Result) {
	if len(res.Pools) == 0 {
		return
	}
	p("## Fragmentation\n\n")
	p("Blocks (tensors) placed inside segments (cudaMalloc, or under expandable segments the runs of mapped pages of each reserved range) by address. Cached free = reserved - allocated; the largest free range is the largest request the cache could serve without a new segment. An OOM is \"fragmentation\" when the cache held at least the failing request in free bytes, else \"capacity\"; the request is the failing cudaMalloc's size (the segment the allocator asked for), or under expandable segments the request the allocator reported (without its report, the pages it asked the driver for).\n\n")
	for i := range res.Pools {
		pl := &res.Pools[i]
		p("### Process %s, device %s\n\n", res.Run.PIDText(pl.PID), analysis.DeviceName(pl.Device))
		if pl.Expandable {
			p("Expandable segments: the allocator maps its segments page by page; reserved is mapped memory.\n\n")
		}
		if u := pl.AtEnd.UnplacedBytes; u > 0 {
			why := "a segment record was lost"
			if res.Run.Mode == "attach" {
				why = "segments allocated before attach, or a segment record lost"
			}
			p("%d bytes of live blocks lie in no traced segment (%s); they are in neither reserved nor allocated.\n\n", u, why)
		}
		p("| moment | reserved | allocated | cached free | largest free range | free ranges | segments | pinned segments |\n")
		p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		row := func(name string, s analysis.PoolState) {
			p("| %s | %d | %d | %d | %d | %d | %d | %d |\n", name, s.ReservedBytes, s.AllocatedBytes, s.CachedFreeBytes,
				s.LargestFreeRange, s.FreeRanges, s.Segments, s.PinnedSegments)
		}
		if pl.Worst != nil {
			row("most cached free, "+secs(res, pl.Worst.Time), *pl.Worst)
		}
		for j := range pl.OOMs {
			o := &pl.OOMs[j]
			row(fmtOOM(res, o), o.State)
		}
		row("end", pl.AtEnd)
		p("\n")
		for j := range pl.OOMs {
			o := &pl.OOMs[j]
			p("- OOM %d at %s: %d bytes (%s) requested at %s, %s OOM, %s", o.Index, secs(res, o.Time), o.RequestBytes,
				units.Bytes(o.RequestBytes), cell(res.Site(o.Stack)), o.Kind, outcomeText(o))
			p("; what was live: `%s`\n", analysis.OOMProfileName(o))
		}
		if len(pl.OOMs) > 0 {
			p("\n")
		}
	}
	churned := false
	for i := range res.Processes {
		pr := &res.Processes[i]
		c := pr.Churn
		if c == nil || !poolOf(res, pr) {
			continue
		}
		if !churned {
			p("## Segment churn\n\n")
			p("| pid | cudaMalloc | cudaFree | calls/s | ms inside | release-and-reallocate cycles | bytes | ms per s of run |\n")
			p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
			churned = true
		}
		// Calls per second only from a second observed (analysis doc,
		// "Rates and projections"); else the calls were made in the run.
		perSec := "in " + units.Duration(c.ObservedNs)
		if _, ok := analysis.RateBaseFor(c.ObservedNs); ok {
			perSec = fmt.Sprintf("%.1f", c.CallsPerSecond)
		}
		p("| %s | %d | %d | %s | %.3f | %d | %d | %.3f |\n", res.Run.PIDText(pr.PID), c.Allocs, c.Frees, perSec,
			float64(c.AllocNs+c.FreeNs)/1e6, c.Cycles, c.CycleBytes, c.CostMsPerSecond)
	}
	if churned {
		p("\n")
	}
}

func fmtOOM(res *analysis.Result, o *analysis.OOM) string {
	return fmt.Sprintf("OOM %d, %s", o.Index, secs(res, o.Time))
}

func itoa(n int) string { return fmt.Sprint(n) }
func outcomeText(o *analysis.OOM) string {
	if o.Outcome == analysis.OOMRetried {
		return "the allocator freed " + itoa(o.ReleasedSegments) + " cached segments and the retry succeeded"
	}
	return "final (no retry succeeded)"
}

func poolOf(res *analysis.Result, pr *analysis.Process) bool {
	for i := range res.Pools {
		if res.Pools[i].PID == pr.PID && res.Pools[i].ProcessStart == pr.Start {
			return true
		}
	}
	return false
}
