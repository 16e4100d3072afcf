// Package bare is the floor that vramprof's probe overhead is measured
// against: uprobes at the same attach points as vramprof's, whose programs
// only count their hits (bpf/bare.bpf.c). `make bench` runs one workload
// unprobed, under this and under vramprof, side by side, and reports the
// ratios; with the returns probed both ways (AttachAtReturns, on the return
// instructions as vramprof does, and Attach, by uretprobes as it did
// before) it prices what giving up uretprobes costs. Nothing in vramprof's
// own path imports it.
//
// Imports, besides the standard library: github.com/cilium/ebpf.
package bare
