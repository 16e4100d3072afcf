package main

import "github.com/vramprof/vramprof/report/recorder"

// The recorder's names that check and diff use (report/recorder holds them).
const (
	traceFile    = recorder.TraceFile
	profileFile  = recorder.ProfileFile
	jsonFile     = recorder.JSONFile
	snapshotFile = recorder.SnapshotFile
)

var (
	errTruncatedTrace = recorder.ErrTruncated
	errOutputDir      = recorder.ErrOutputDir
	analyze           = recorder.Analyze
	segmentsOf        = recorder.SegmentsOf
	writeFileAtomic   = recorder.WriteFileAtomic
)
