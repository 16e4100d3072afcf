package analysis

import "fmt"

// EndReasonUntimed is the End reason an importer gives a stream whose
// times are an order only: a PyTorch snapshot whose trace entries carry no
// time_us (profile/snapshot numbers them instead).
const EndReasonUntimed = "snapshot without times"

// Imported reports whether the stream came from an importer (a PyTorch
// snapshot, Mode "import"). A snapshot is one allocator's state and
// history: it knows no PID (its events carry 0), no parent, no exit code,
// no host and no wall-clock start. Outputs say "unknown" for those, never
// 0 (see DESIGN.md: unknown until seen is "unknown", not 0).
func (r *Run) Imported() bool {
	return r.Mode == "import"
}

// TimesKnown reports whether the stream's times are clock times. An
// imported snapshot without a trace has every event at its start, and one
// whose entries have no time_us has an order only (EndReasonUntimed):
// then no time, offset or duration of the run is known.
func (r *Run) TimesKnown() bool {
	return !r.Imported() || r.Duration > 0 && r.EndReason != EndReasonUntimed
}

// PIDText renders a process ID for people: "unknown" in an imported
// stream, whose processes have none, the decimal PID otherwise.
func (r *Run) PIDText(pid uint32) string {
	if r.Imported() {
		return "unknown"
	}
	return fmt.Sprint(pid)
}
