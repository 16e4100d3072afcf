// Package compare judges and compares recordings: the verdicts of
// `vramprof check` (limits on the peak and on what is live at the end,
// growth over a baseline, lost events, whether the recording and the
// baseline are whole runs: no verdict holds on a cut or partial one, an
// out-of-memory failure, which fails whatever the limits, with its
// forensics, and each pytest test's peak against its limit, from figures
// package pytests reads), the baseline file it writes
// (schema vramprof/baseline/v1), its JUnit XML, GitHub annotations and step
// summary (Verdict.Publish writes them all, through the caller's atomic
// file writer), and the model and text of `vramprof diff` (schema
// vramprof/diff/v1).
//
// Everything here works on Figures: the figures of one report.json,
// keyed so that two runs line up. Processes are matched by command (pids
// differ from run to run) and stacks by their rendered frames with
// unsymbolized addresses blanked (ASLR moves them from run to run). A
// Figures come from a report.json (LoadReport, FromReport) or a baseline
// (LoadBaseline); analysing a trace into a report is the caller's business
// (cmd/vramprof/internal/recorder's LoadFigures), so that this package
// needs neither root nor a scenario to be tested.
//
// Verdicts are exact: sizes and percentages are compared as integers and
// rationals (math/big), never as floating point, so that a limit set to the
// byte passes and one byte less fails. The same recording and limits give
// the same verdict, text and files, byte for byte.
//
// Functions and types here hold no global state; a Verdict or a Diff is
// not safe for concurrent mutation but may be rendered from several
// goroutines once built.
//
// Imports, besides the standard library: analysis, probes/event, report,
// report/pytests, report/units and github.com/jstemmer/go-junit-report/v2.
package compare
