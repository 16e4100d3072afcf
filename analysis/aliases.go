package analysis

import (
	"github.com/vramprof/vramprof/analysis/finding"
	"github.com/vramprof/vramprof/probes/event"
)

// The findings and the result types they quote live in package finding, so
// that package analysis/rules can return them without importing the
// Analyzer; these aliases keep their names here for every caller (report,
// profile, cmd).

// Aliases of finding's types.
type (
	Allocation         = finding.Allocation
	CacheEvidence      = finding.CacheEvidence
	Churn              = finding.Churn
	Class              = finding.Class
	DevicePeak         = finding.DevicePeak
	FailedCallEvidence = finding.FailedCallEvidence
	FailedCalls        = finding.FailedCalls
	Failure            = finding.Failure
	Finding            = finding.Finding
	FindingStack       = finding.FindingStack
	GCThreshold        = finding.GCThreshold
	ImbalanceEvidence  = finding.ImbalanceEvidence
	ImbalanceStack     = finding.ImbalanceStack
	Leak               = finding.Leak
	MemorySpace        = finding.MemorySpace
	OOM                = finding.OOM
	OOMCalls           = finding.OOMCalls
	OOMKind            = finding.OOMKind
	OOMOutcome         = finding.OOMOutcome
	OOMReport          = finding.OOMReport
	PeakEvidence       = finding.PeakEvidence
	PinnedEvidence     = finding.PinnedEvidence
	Pool               = finding.Pool
	PoolAdvice         = finding.PoolAdvice
	PoolEvidence       = finding.PoolEvidence
	PoolState          = finding.PoolState
	RateBase           = finding.RateBase
	Severity           = finding.Severity
	SpikeEvidence      = finding.SpikeEvidence
	StackUsage         = finding.StackUsage
	Usage              = finding.Usage
)

// Aliases of finding's constants.
const (
	AdviceExpandable     = finding.AdviceExpandable
	AdviceInterleaved    = finding.AdviceInterleaved
	AdviceLowerPeak      = finding.AdviceLowerPeak
	AdviceReduceBatch    = finding.AdviceReduceBatch
	KindCacheGrowth      = finding.KindCacheGrowth
	KindChurn            = finding.KindChurn
	KindDeviceImbalance  = finding.KindDeviceImbalance
	KindFailedCall       = finding.KindFailedCall
	KindFragmentation    = finding.KindFragmentation
	KindLeak             = finding.KindLeak
	KindOOM              = finding.KindOOM
	KindPeak             = finding.KindPeak
	KindPinnedHostGrowth = finding.KindPinnedHostGrowth
	KindSpike            = finding.KindSpike
	OOMCapacity          = finding.OOMCapacity
	OOMFinal             = finding.OOMFinal
	OOMFragmentation     = finding.OOMFragmentation
	OOMPending           = finding.OOMPending
	OOMRetried           = finding.OOMRetried
	SeverityCritical     = finding.SeverityCritical
	SeverityHigh         = finding.SeverityHigh
	SeverityInfo         = finding.SeverityInfo
	SeverityMedium       = finding.SeverityMedium
	SpaceDevice          = finding.SpaceDevice
	SpacePhysical        = finding.SpacePhysical
	SpaceHost            = finding.SpaceHost
	ProjectionFactor     = finding.ProjectionFactor
	NoStack              = finding.NoStack
)

// RankFindings orders findings by bytes at stake (finding.RankFindings).
func RankFindings(x, y *Finding) int { return finding.RankFindings(x, y) }

// FirstStack returns a finding's first stack (finding.FirstStack).
func FirstStack(f *Finding) event.StackID { return finding.FirstStack(f) }

// RateBaseFor returns the longest time base not longer than observedNs
// (finding.RateBaseFor).
func RateBaseFor(observedNs uint64) (RateBase, bool) { return finding.RateBaseFor(observedNs) }

// Projectable reports whether a projection horizonSeconds ahead stays
// within ProjectionFactor times observedNs (finding.Projectable).
func Projectable(horizonSeconds float64, observedNs uint64) bool {
	return finding.Projectable(horizonSeconds, observedNs)
}

// IsOutOfMemory reports whether an allocation's return code says the memory
// ran out (finding.IsOutOfMemory).
func IsOutOfMemory(ret int32) bool { return finding.IsOutOfMemory(ret) }
