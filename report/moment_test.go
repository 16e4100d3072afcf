package report

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// momentResult is the train recording closed as an oom moment at its 4 GiB
// failure (as the recorder does: an End of its own, and Run.Moment).
func momentResult(t *testing.T) (*analysis.Result, *event.Event) {
	t.Helper()
	var recs []event.Record
	var failed *event.Event
	for _, r := range trainRecords() {
		if _, ok := r.(*event.End); ok {
			break
		}
		recs = append(recs, r)
		if e, ok := r.(*event.Event); ok && e.Kind == event.KindAlloc && analysis.IsOutOfMemory(e.Ret) && failed == nil {
			failed = e
			break // the moment: right after the failure
		}
	}
	require.NotNil(t, failed, "train has an out-of-memory failure")
	recs = append(recs, &event.End{Time: failed.Time + 1000, Reason: analysis.MomentOOMReason})
	res := mustResult(t, recs)
	res.Run.Moment = &analysis.Moment{Kind: analysis.MomentOOM, Index: 2, Time: failed.Time + 1000, Request: failed,
		SkippedOOMs: 7, TraceBytes: 12345}
	return res, failed
}

// TestMomentReport: a moment report says which moment it is in every
// format; report.json adds run.moment and lists exit_code as unknown.
func TestMomentReport(t *testing.T) {
	res, failed := momentResult(t)
	j := decodeJSON(t, res)
	run := j["run"].(map[string]any)
	assert.Equal(t, "oom moment", run["end_reason"])
	assert.Contains(t, run["unknown"], "exit_code")
	m := run["moment"].(map[string]any)
	assert.Equal(t, "oom", m["kind"])
	assert.EqualValues(t, 2, m["index"])
	assert.EqualValues(t, 7, m["skipped_ooms"])
	assert.EqualValues(t, 12345, m["trace_bytes"])
	assert.EqualValues(t, res.Rel(failed.Time+1000), m["time_ns"])
	req := m["request"].(map[string]any)
	assert.EqualValues(t, failed.Size, req["bytes"])
	assert.Equal(t, "cudaMalloc", req["api"])
	assert.Equal(t, "2 (cudaErrorMemoryAllocation)", req["error"])
	assert.EqualValues(t, res.Rel(failed.Time), req["time_ns"])

	var md, html, txt bytes.Buffer
	require.NoError(t, WriteMarkdown(&md, res))
	require.NoError(t, WriteHTML(&html, res))
	require.NoError(t, WriteSummary(&txt, res))
	assert.Contains(t, md.String(), "oom moment 2, recording went on (7 out-of-memory failures")
	assert.Contains(t, md.String(), "**Moment:** these figures are the trace up to oom moment (oom 2,")
	assert.Contains(t, md.String(), "the failed request: cudaMalloc of 4294967296 bytes")
	assert.Contains(t, html.String(), "<dt>moment</dt>")
	assert.Contains(t, txt.String(), "oom moment 2, recording went on")

	// Any other report has none of it.
	plain := decodeJSON(t, mustResult(t, trainRecords()))["run"].(map[string]any)
	assert.NotContains(t, plain, "moment")
	assert.Nil(t, plain["unknown"], "a run's fields are all known")
}
