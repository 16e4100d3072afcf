// Package report renders an analysis.Result for people and programs:
// report.json (schema vramprof/report/v1), report.md, report.html (one
// self-contained page with SVG charts: see html.go), and the short summary
// printed on the terminal when a run stops.
//
// report words the findings (findings.go, findings_pools.go): the analysis
// gives each as facts, report writes its summary and remediation from them,
// the same in every output, and lists the findings in the analysis's rank
// (analysis.RankFindings), ties broken by summary, then first stack.
//
// report.json keeps every field DESIGN.md promises and adds more (run facts,
// timelines, stacks at the peak and at the end, libraries); fields are only
// ever added. "blocks" is absent unless the block layer was traced.
//
// "totals", "devices" and each process's figures are device memory counted
// once: allocations plus physical memory (cuMemCreate), never a nested driver
// call again and never pinned host memory. "books" ({"runtime", "driver"},
// top level and per process, always present) are the per-API ledgers, every
// call nested or not, shown side by side and never summed. "host" (always
// present, zeros when none) is pinned host memory. "vmm" (absent when no VMM
// call was traced) has the reserved, physical and mapped bytes, at the peak
// and at the end, per device. Each process carries its "ppid" (0 when
// unknown) and each timeline its "space" ("device" or "host"). Device
// indexes stay integers with -1 for the unknown device, and every device
// also carries a "name" ("0", "1", "unknown"). capacity_bytes is null while
// the device's size is unknown.
//
// "nvml" is the device layer's status: absent when the trace has no NVML
// record ("NVML: off" in text), {"available": false, "reason"} when NVML
// could not start (text renderings print "NVML unavailable: <reason>" once
// and no other NVML figure), else {"available": true, "samples"}. Devices
// carry NVML's product_name, uuid and nvml_* figures (null without a
// sample); processes carry "nvml" (NVML's used bytes next to the traced
// live bytes at one sample, and the gap between them, negative when NVML
// lags) and "preexisting_bytes_estimate" with its "preexisting_basis": 0
// when traced from the start (run mode), an NVML estimate when attached,
// null when attached without NVML. A PID reused during the run gives two
// processes with different "start_ns"; the first has "superseded_ns", and
// timelines and findings carry "process_start_ns".
//
// "iterations" (always present, empty without a detected loop) has one
// entry per process whose training loop the analysis found: count,
// period_ns, first and last start, the pacing site, and the device bytes
// allocated and the live growth per iteration. Findings of kind
// "pinned_host_growth" carry their growth evidence in "leak" (host memory,
// never in the device figures); "device_imbalance" findings compare the
// heaviest and the lightest device peak.
//
// A finding's "leak" evidence (leak and pinned_host_growth) has the growth
// over the run (growth_bytes, the finding's bytes, from from_ns to to_ns),
// the detection windows (window_start_ns, window_end_ns,
// window_growth_bytes, window_ends_ns, live_bytes) and the rates with the
// span they were observed over (observed_ns), the time base the texts use
// (rate_base) and the projection horizon (projection_horizon_s,
// time_to_oom_projected): see analysis's doc, "Rates and projections".
// Texts print durations and rates in the units that fit (report/units).
//
// An imported snapshot knows no process, exit code or host: the texts say
// "unknown", and report.json keeps v1's values (0, "") but lists the
// placeholders in run.unknown and processes[].unknown (with the times when
// the snapshot has an order only).
//
// Times ending in _ns count from the start of the run. Lists are never
// null, and all orderings come from the Result's sorted slices, so a replay
// of one trace writes byte-identical files.
//
// Bytes are exact integers everywhere; human units ("1.50 GiB") are only
// ever printed next to them. Lost events are always shown, even when 0.
//
// The Perfetto trace (perfetto.go: `report --format perfetto`) is the one
// output written while the analysis runs rather than from its Result: it
// is fed every allocation made live or let go (analysis.Options.Watch),
// so its counters are the analysis's own levels at every change, and it
// streams them; the slices, instants and metadata follow at Finish. Its
// layout, time base and size bounds are in perfetto.go's comment.
//
// "tests" (absent unless the recording shows pytest tests: a TestPhase
// record, or an allocation made in a test's frame) has one entry per
// pytest test an allocation was made in, in the order they began: its
// node id, basis, layer, peak (bytes, time, site), leak, allocations and
// bytes allocated, its span, and under `vramprof check` the limit its peak
// was judged against with the verdict. The figures are report/pytests',
// computed by the caller from the same trace and handed in with the
// Result as a Report (tests.go); report.md and report.html show them in a
// Tests table. WriteJSON, WriteMarkdown and WriteHTML render a Result
// alone: no tests.
//
// Judging and comparing recordings (check's verdicts, baselines, JUnit and
// GitHub outputs, diff) is report/compare's, on report.json's figures.
//
// Its functions read the Result without changing it and are safe for
// concurrent use.
//
// Imports, besides the standard library: analysis, probes/event,
// report/pytests and report/units.
package report

import "errors"

// ErrNilResult is returned when asked to render a nil Result.
var ErrNilResult = errors.New("report: nil analysis result")
