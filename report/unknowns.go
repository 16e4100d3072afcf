package report

import (
	"fmt"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report/units"
)

// What an imported snapshot does not know (analysis.Run.Imported) is
// "unknown" in every output, never 0: its PID, parent, exit code, host and
// wall-clock start, and its times when it has an order only
// (analysis.Run.TimesKnown). report.json keeps v1's fields and values and
// lists those placeholders in "unknown".

// ppidText renders a parent PID: "unknown" in an imported stream.
func ppidText(res *analysis.Result, ppid uint32) string {
	if res.Run.Imported() {
		return "unknown"
	}
	return fmt.Sprint(ppid)
}

// endText says how the run ended and with which exit code, "exit code
// unknown" for an imported snapshot.
func endText(run *analysis.Run) string {
	if run.Imported() {
		return run.EndReason + ", exit code unknown"
	}
	return fmt.Sprintf("%s, exit code %d", run.EndReason, run.ExitCode)
}

// durationText is the run's duration, "duration unknown" when its times
// are an order only.
func durationText(run *analysis.Run) string {
	if !run.TimesKnown() {
		return "duration unknown"
	}
	return units.Duration(run.Duration)
}

// runUnknown lists the run fields of report.json that hold placeholders,
// nil when every one is known.
func runUnknown(run *analysis.Run) []string {
	var out []string
	if run.Imported() {
		out = append(out, "pid", "exit_code", "host", "start_time")
	}
	if !run.TimesKnown() {
		out = append(out, "duration_ns", "times")
	}
	return out
}

// processUnknown lists a process's placeholder fields in report.json.
func processUnknown(res *analysis.Result) []string {
	var out []string
	if res.Run.Imported() {
		out = append(out, "pid", "ppid")
	}
	if !res.Run.TimesKnown() {
		out = append(out, "peak_time_ns")
	}
	return out
}
