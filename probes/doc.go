// Package probes traces the CUDA allocation API in live processes with eBPF
// and turns what the kernel sends into event records.
//
// A Session owns everything that touches the kernel: the BPF objects
// (bpf/vramprof.bpf.c, compiled into bpf_x86_bpfel.o by `make generate`),
// the ring buffer readers, the uprobe links and the lifecycle tracepoints.
// It wires parts that each own one concern: the loader (loader.go: objects,
// ring buffers, links, tracepoints, guardian), the reader (reader.go: the
// read loop, counting short and unknown records beside the BPF side's lost
// ones), the process table (procs.go: targets' lifecycle, behind a small
// procHost interface that tests drive without root), and the stack table
// (stacks.go: interning and symbolization). It
// finds the CUDA runtime (libcudart) and driver (libcuda) wherever a target
// maps them: shared libraries, pip's hashed copies, copies linked into an
// executable or another library, each file probed once (uprobes live on the
// inode), each function at its entry and on its return instructions
// (returns.go): never a uretprobe, which a C++ exception cannot unwind
// through. A runtime linked in and stripped cannot be probed: scanning finds
// it by its strings (stripped.go) and says so in a Library record
// (StrippedRuntime); Attach then refuses with ErrStrippedRuntime when no
// driver is loaded to probe instead. It follows the dynamic loader so that a runtime loaded after the start with
// dlopen is probed before its first call, follows forks of its targets, and
// symbolizes stacks while the process is alive. In a target that runs
// CPython it also probes libc's setenv and unsetenv for pytest's
// PYTEST_CURRENT_TEST (pytest.go): TestPhase records, in effect order with
// the events, say which test ran when.
//
// Records reach the caller's Sink in the order the session produced them,
// from one goroutine: Process, Library, Mapping and Stack records always
// precede the events that refer to them. Events go out in the order they
// took effect, not the order the calls returned: a release at its entry,
// anything else at its return, and Event.Time is that effect time (see
// reorder.go; the few that arrive too late are counted in Lost.Late). Nothing here knows about analysis
// or reports; those consume the records (see DESIGN.md, "Data flow").
//
// Lifecycle: NewSession loads and checks privileges; Launch or Attach (or
// AttachAll) names targets; Run reads until its context ends or the targets
// exit; Close releases everything in reverse order and resumes the targets
// the loader probe left stopped (only those). Two guardian processes
// resume them instead when the session's process dies (guardian.go); one
// that dies first is replaced while the other guards. A stop of the user's sent while a target
// is held stays (resume.go). A Session is
// not safe for concurrent use, except Stats.
//
// Tracing needs Linux: elsewhere only the sentinel errors build, so that
// callers compile everywhere.
//
// Imports, besides the standard library: probes/allocspec, probes/event,
// probes/python, probes/sigstate, probes/symbolize, probes/usdt,
// github.com/cilium/ebpf, github.com/ianlancetaylor/demangle,
// github.com/prometheus/procfs and golang.org/x/sys.
package probes
