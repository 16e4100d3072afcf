package event

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// traceSize is what one fixture costs on disk in format 1 (as recorded), in
// format 2 (the test's format 2 writer) and in the format this package
// writes (re-encoded).
type traceSize struct {
	name           string
	events         int
	v1File, v1Ev   int // whole file; event records only
	v2File, v2Ev   int
	curFile, curEv int
}

// eventBytes returns the bytes a trace spends on its events: the file minus
// the same records written without their events, in the current format or
// (v2) in format 2.
func eventBytes(tb testing.TB, h *Header, recs []Record, v2 bool) (file, events int) {
	tb.Helper()
	var others []Record
	for _, r := range recs {
		if _, ok := r.(*Event); !ok {
			others = append(others, r)
		}
	}
	if v2 {
		all, _, _ := v2Trace(tb, h, nil, recs, 0)
		rest, _, _ := v2Trace(tb, h, nil, others, 0)
		return len(all), len(all) - len(rest)
	}
	file = len(mustTrace(tb, h, recs...))
	return file, file - len(mustTrace(tb, h, others...))
}

// measureFixtures re-encodes every format 1 fixture and measures both.
func measureFixtures(tb testing.TB) []traceSize {
	tb.Helper()
	var out []traceSize
	for _, name := range v1Fixtures {
		data := mustFixture(tb, name)
		r, recs, err := readAll(tb, data)
		require.NoError(tb, err)
		h := *r.Header()
		s := traceSize{name: name, v1File: len(data)}
		for _, rec := range recs {
			if _, ok := rec.(*Event); ok {
				s.events++
			}
		}
		// Format 1 events are fixed frames.
		s.v1Ev = s.events * (frameHead + eventSize + frameTail)
		s.v2File, s.v2Ev = eventBytes(tb, &h, recs, true)
		s.curFile, s.curEv = eventBytes(tb, &h, recs, false)
		out = append(out, s)
	}
	return out
}

// sizeTable renders the sizes as the bench prints them.
func sizeTable(sizes []traceSize) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s %7s  %22s  %22s  %22s\n", "scenario", "events", "format 1 B/event", "format 2 B/event",
		fmt.Sprintf("format %d B/event", Version))
	fmt.Fprintf(&b, "%-16s %7s  %10s %11s  %10s %11s  %10s %11s\n", "", "", "events", "whole file", "events", "whole file",
		"events", "whole file")
	var sum [6]float64
	var pooled [7]int
	for _, s := range sizes {
		for i, v := range [...]int{s.events, s.v1Ev, s.v1File, s.v2Ev, s.v2File, s.curEv, s.curFile} {
			pooled[i] += v
		}
		n := float64(s.events)
		row := [6]float64{float64(s.v1Ev) / n, float64(s.v1File) / n, float64(s.v2Ev) / n, float64(s.v2File) / n,
			float64(s.curEv) / n, float64(s.curFile) / n}
		for i := range sum {
			sum[i] += row[i]
		}
		fmt.Fprintf(&b, "%-16s %7d  %10.1f %11.1f  %10.1f %11.1f  %10.1f %11.1f\n", s.name, s.events,
			row[0], row[1], row[2], row[3], row[4], row[5])
	}
	k := float64(len(sizes))
	fmt.Fprintf(&b, "%-16s %7s  %10.1f %11.1f  %10.1f %11.1f  %10.1f %11.1f\n", "mean", "",
		sum[0]/k, sum[1]/k, sum[2]/k, sum[3]/k, sum[4]/k, sum[5]/k)
	n := float64(pooled[0])
	fmt.Fprintf(&b, "%-16s %7d  %10.1f %11.1f  %10.1f %11.1f  %10.1f %11.1f\n", "all, pooled", pooled[0],
		float64(pooled[1])/n, float64(pooled[2])/n, float64(pooled[3])/n, float64(pooled[4])/n,
		float64(pooled[5])/n, float64(pooled[6])/n)
	return b.String()
}

// BenchmarkTraceSize prints bytes per event of the scenarios' recorded
// traces, format 1 as recorded, format 2 and this package's format, in one run
// (make bench). "events" counts the bytes of event records only; "whole
// file" everything, whose fixed part (header, libraries, mappings, stacks:
// about 2 KB) dominates the short scenarios.
func BenchmarkTraceSize(b *testing.B) {
	var sizes []traceSize
	for b.Loop() {
		sizes = measureFixtures(b)
	}
	var ev, v1, v2 float64
	var pooledEv, pooledV2, n int
	for _, s := range sizes {
		ev += float64(s.curEv) / float64(s.events)
		v1 += float64(s.v1Ev) / float64(s.events)
		v2 += float64(s.v2Ev) / float64(s.events)
		pooledEv, pooledV2, n = pooledEv+s.curEv, pooledV2+s.v2Ev, n+s.events
	}
	b.ReportMetric(v1/float64(len(sizes)), "v1-B/event")
	b.ReportMetric(v2/float64(len(sizes)), "v2-B/event")
	b.ReportMetric(ev/float64(len(sizes)), "B/event")
	b.ReportMetric(float64(pooledV2)/float64(n), "v2-pooled-B/event")
	b.ReportMetric(float64(pooledEv)/float64(n), "pooled-B/event")
	fmt.Fprint(os.Stdout, sizeTable(sizes))
}

// syntheticRecords are a large trace's records, the fixtures' event
// streams repeated, shifted in time and address space, n events long.
func syntheticRecords(tb testing.TB, n int) []Record {
	tb.Helper()
	var events []Event
	var out []Record
	for _, name := range []string{"steady", "leak", "threads", "pool_steady", "spike"} {
		_, recs, err := readAll(tb, mustFixture(tb, name))
		require.NoError(tb, err)
		for _, rec := range recs {
			switch r := rec.(type) {
			case *Event:
				events = append(events, *r)
			case *End:
			default:
				out = append(out, r)
			}
		}
	}
	base := events[0].Time
	all := make([]Event, n)
	for i := range all {
		round := uint64(i / len(events))
		ev := events[i%len(events)]
		ev.Time = base + round<<32 + (ev.Time-base)%(1<<32)
		if ev.Addr != 0 {
			ev.Addr += round << 40
		}
		all[i] = ev
		out = append(out, &all[i])
	}
	return append(out, &End{Time: base + uint64(n)<<32, Reason: "exited"})
}

// syntheticTrace is syntheticRecords written in format 2 or in this
// package's, flushed as the recorder does at 10k events a second.
func syntheticTrace(tb testing.TB, n int, v2 bool) []byte {
	tb.Helper()
	recs := syntheticRecords(tb, n)
	if v2 {
		data, _, _ := v2Trace(tb, testHeader(), nil, recs, 10_000)
		return data
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader())
	require.NoError(tb, err)
	for i, r := range recs {
		require.NoError(tb, w.Write(r))
		if i%10_000 == 9_999 {
			require.NoError(tb, w.Flush())
		}
	}
	require.NoError(tb, w.Close())
	return buf.Bytes()
}

// BenchmarkReplay reads a 2M-event trace made from the scenarios' streams,
// in format 2 and in this package's format: see the events/s metric (the
// floor is 5M events/s), and cpu-events/s, the same over the process's CPU
// time rather than the wall clock's (steadier on a busy machine).
func BenchmarkReplay(b *testing.B) {
	const n = 2_000_000
	for _, v := range []uint16{2, Version} {
		data := syntheticTrace(b, n, v == 2)
		b.Run(fmt.Sprintf("format=%d", v), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			var before, after syscall.Rusage
			require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &before))
			for b.Loop() {
				r, err := NewReader(bytes.NewReader(data))
				if err != nil {
					b.Fatal(err)
				}
				count := 0
				for {
					rec, err := r.Next()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					if _, ok := rec.(*Event); ok {
						count++
					}
				}
				if count != n {
					b.Fatalf("read %d events, want %d", count, n)
				}
			}
			require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &after))
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(n)*float64(b.N)/cpu.Seconds(), "cpu-events/s")
			b.ReportMetric(float64(len(data))/n, "B/event")
		})
	}
}
