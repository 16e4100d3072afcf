package finding

import (
	"cmp"

	"github.com/vramprof/vramprof/probes/event"
)

// Severity ranks a finding's urgency.
type Severity string

// Severities, most urgent first.
const (
	SeverityCritical Severity = "critical" // the run failed or will: an OOM
	SeverityHigh     Severity = "high"     // a leak worth >= 10% of the process's peak
	SeverityMedium   Severity = "medium"   // a smaller leak
	SeverityInfo     Severity = "info"     // facts to act on if memory is tight: the peak
)

// Finding kinds, as report.json names them.
const (
	KindPeak = "peak"
	KindLeak = "leak"
	KindOOM  = "oom"
	// KindFailedCall: allocation calls that failed with an error other than
	// out-of-memory (no device, driver missing or too old, not
	// initialized, an invalid argument): one finding per error and process.
	KindFailedCall = "failed_call"
	// KindFragmentation: memory reserved by a caching allocator but not
	// allocated, in ranges too small to use.
	KindFragmentation = "fragmentation"
	// KindChurn: segments released and allocated again (empty_cache).
	KindChurn = "churn"
	// KindPinnedHostGrowth: pinned host memory (cudaMallocHost,
	// cudaHostAlloc, cuMemHostAlloc) whose live bytes grow over the run.
	KindPinnedHostGrowth = "pinned_host_growth"
	// KindDeviceImbalance: one device's peak well above another's, across
	// the devices of a process or of a process group (ranks, workers).
	KindDeviceImbalance = "device_imbalance"
	// KindCacheGrowth: a caching allocator's reserve (its segments) grew
	// beyond what its tensors (blocks) ever held: the cache, not a leak.
	// Severity info.
	KindCacheGrowth = "cache_growth"
)

// KindSpike: a large allocation that lives briefly (a checkpoint being
// saved) and lifts the process's memory while it does.
const KindSpike = "spike"

// Finding is one conclusion with the evidence for it, as facts (see
// evidence.go): package report words it. Bytes is what is at stake (see
// DESIGN.md): the peak for "peak", the growth for "leak", the failing
// request for "oom".
type Finding struct {
	Kind     string
	Severity Severity
	PID      uint32
	// ProcessStart is the Start of the process instance (see Process).
	ProcessStart uint64
	Bytes        uint64
	// Time is when the finding's event happened: the peak, the first failure,
	// the end of the leak's first window.
	Time   uint64
	Stacks []FindingStack
	// Peak, OOMCalls, FailedCall, Pool, Pinned, Spike and Imbalance are
	// the evidence of their kinds (peak, oom without the block layer,
	// failed_call, oom of the block layer and fragmentation,
	// pinned_host_growth, spike, device_imbalance); nil for other kinds.
	Peak       *PeakEvidence
	OOMCalls   *OOMCalls
	FailedCall *FailedCallEvidence
	Pool       *PoolEvidence
	Pinned     *PinnedEvidence
	Spike      *SpikeEvidence
	Imbalance  *ImbalanceEvidence
	// Leak is the growth evidence of a leak or a pinned_host_growth
	// finding; nil for other kinds. For pinned_host_growth it sums the
	// growing stacks.
	Leak *Leak
	// OOM is the failure an oom or fragmentation finding is about, when the block layer was traced; nil otherwise.
	OOM *OOM
	// Churn is a churn finding's evidence.
	Churn *Churn
	// Cache is a cache_growth finding's evidence.
	Cache *CacheEvidence
}

// FindingStack is a stack named by a finding, with its rendered frames.
type FindingStack struct {
	Stack  event.StackID
	Frames []string
	Site   string
	Count  uint64
	Bytes  uint64
}

// RankFindings orders findings by bytes at stake, then severity, kind and
// process: the order of Result.Findings. Findings that tie are ordered by
// their wording, then their first stack (report sorts them so).
func RankFindings(x, y *Finding) int {
	return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(severityRank(x.Severity), severityRank(y.Severity)),
		cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.PID, y.PID), cmp.Compare(x.ProcessStart, y.ProcessStart))
}

// FirstStack returns a finding's first stack; 0 when it names none.
func FirstStack(f *Finding) event.StackID {
	if len(f.Stacks) == 0 {
		return 0
	}
	return f.Stacks[0].Stack
}

func severityRank(s Severity) int {
	switch s {
	case SeverityCritical:
		return 0
	case SeverityHigh:
		return 1
	case SeverityMedium:
		return 2
	}
	return 3
}

// NoStack is how a missing stack (StackID 0, or a stack record never seen)
// is rendered.
const NoStack = "[no stack]"
