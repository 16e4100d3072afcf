// Package exporter is `vramprof serve`'s live view of every traced process:
// it takes a session's records as a probes.Sink, keeps one analysis.Analyzer
// per process, and serves Prometheus metrics and pprof profiles from them
// over HTTP.
//
// # Series
//
// A series is a group of processes by default: command, cgroup, the
// container and Kubernetes pod UID in the cgroup path (groups.go), and the
// pod's name, namespace and container name, read once per container from
// its bundle in the node's container runtime directories when the pod UID
// there is the path's (pods.go); its
// counters keep the figures of members that left, so they never go
// backwards. Options.PerProcess makes a series per process (pid, start).
// Labels come from the session's Process record, read at adoption, so a
// process that exits at once keeps them. A process has one set of labels,
// the latest known (a label a later record gives replaces one unknown
// before), on every series of it, figures and findings alike; only the
// command is per image (an exec). GPUs are labelled as
// dcgm-exporter labels them (gpu, UUID, modelName, Hostname: nvml.go).
//
// # Profiles
//
// /debug/pprof/ lists the profiles; allocs and heap take ?seconds=N, the
// difference over the next N seconds, as net/http/pprof (http.go).
//
// With NVML on (serve --nvml auto), the session's NVML sampler writes its
// records here too: the last status, description and sample of each device
// are served as gauges, and nothing at all when NVML is unavailable but the
// reason (nvml.go); a GPU whose processes NVML does not list says why on
// its own gauge.
//
// # Memory bound
//
// Nothing grows with the number of events, only with what is live and with
// the number of distinct call sites:
//
//   - no event log and no trace file: each record is folded into its
//     process's Analyzer and dropped;
//   - an Analyzer holds its process's live allocations, one aggregate per
//     allocation class (process, stack, device, API, size) and per stack,
//     fixed-size timeline and leak grids, and per site at most
//     DefaultIterationLog (4096) allocation times and live-bytes changes
//     (the iteration detector's logs, analysis.Options.IterationLog):
//     bounded per site, not per event (TestMemoryIsBounded);
//   - a process that exited is kept for Options.Grace after its exit (late
//     records, a last pprof fetch) and dropped once a /metrics scrape has
//     reported its final figures, or after Options.TTL whether scraped or
//     not;
//   - a group (a label set) keeps a few counters of the members that left,
//     and is forgotten once no process has been in it for Options.TTL: the
//     groups held are those of the last TTL, not every job ever seen.
//
// Figures are computed at scrape time (analysis.Analyzer.SoFar) and
// cached until the process's next record, so a scrape costs one analysis
// per changed process. The analysis holds that process's lock: its records
// wait meanwhile (about 10 ms for 100k live allocations at 1000 sites),
// which the session's ring buffer absorbs; other processes' records do not
// wait.
//
// # Processes
//
// A process is its PID and its start time (the Process record's, else
// /proc/PID/stat): a Process record starts a new one unless it is an exec
// of the running process (same start time). A PID reused while the exited
// process that had it is still held has two, each with its own analysis
// (and, per process, series: the start label), the first marked exited.
// Records of a PID with no Process record (gone before the session could
// adopt it) make a process with what /proc still shows, most often
// nothing. One another session takes (Options.Held) ends as at an exit.
//
// # Connections
//
// Serve holds at most MaxConns connections, closing the longest idle one
// to make room, each within read, write and idle timeouts (conns.go): a
// flood of connections costs a bounded amount of memory and descriptors
// (TestConnectionFlood), and scrapes are still answered.
//
// # Concurrency
//
// An Exporter is safe for concurrent use: the session's reader writes
// records while HTTP handlers read figures so far.
//
// Imports, besides the standard library: analysis, probes/event, profile,
// github.com/google/pprof and github.com/prometheus/client_golang.
package exporter
