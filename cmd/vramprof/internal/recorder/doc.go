// Package recorder is vramprof's recording path: what `vramprof run`,
// `attach`, `check` and `report` do between the probes and the files (the
// trace written, read back, and turned into the outputs). It is internal to
// the command, its only user; the packages below it (probes, analysis,
// profile, report) know nothing of it.
//
// A Recorder is the sink a probes session writes into. It owns the output
// directory (Dir: opened once, never written through a symbolic link, an
// earlier recording refused unless forced), the trace (trace.vpt, or with
// Options.MaxTrace a flight recorder's ring of segments trace-NNNNNN.vpt,
// each restoring what came before it from a checkpoint), and the moment
// reports (the full outputs at an out-of-memory failure, rate limited, or
// when SignalMoment asks: the command line calls it on SIGUSR1; the
// package handles no signal) written under moments/ while the recording
// goes on. Finish ends the trace and replays it into the outputs:
// profile.pb.gz, report.json, report.md, report.html and oom-<n>.pb.gz.
//
// The outputs always come from a replay of the trace (Analyze), never from
// live state: that is what makes `vramprof report` byte-identical to the
// live run. Each pytest test's figures (report/pytests) are followed in
// the same read (tests.go) and rendered with the Result; only check's
// limits (Options.TestLimit), shown beside them, are not in the trace.
// Finish reads the trace back through the descriptor it wrote
// it with (a flight recorder's segments through the directory opened),
// never by path: a link put in the directory's place meanwhile leads
// nowhere. Analyze, Replay and Report read a trace, its segments, or a
// PyTorch memory snapshot pickle, once and from the start (input.go: a
// pipe or FIFO reads as a file does), and need no privileges; LoadFigures
// reads a recording into what `vramprof diff` and `check` compare
// (report/compare), and Tests its trace into each pytest test's own
// figures (report/pytests).
//
// The package imports neither cilium/ebpf nor go-nvml: the session and the
// NVML sampler write records into a Recorder through its Write, and the
// caller supplies the clock the records are stamped with.
//
// Imports, besides the standard library: analysis, analysis/checkpoint,
// probes/event, profile, profile/snapshot, report, report/compare and
// report/pytests.
package recorder
