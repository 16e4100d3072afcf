package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// nvmlSample is one device's sample; procs alternates pid, used bytes.
func nvmlSample(t uint64, dev int32, total, used uint64, procs ...uint64) *event.Sample {
	s := &event.Sample{Time: t, Device: dev, TotalBytes: total, UsedBytes: used, FreeBytes: total - used}
	for i := 0; i+1 < len(procs); i += 2 {
		s.Processes = append(s.Processes, event.ProcessUsage{PID: uint32(procs[i]), UsedBytes: procs[i+1]})
	}
	return s
}

// attachStream is newStream in attach mode: pid 100 traced from 1 s on.
func attachStream() *eventtest.Stream {
	s := eventtest.NewStream()
	h := *s.Recs[0].(*event.Header)
	h.Mode = "attach"
	s.Recs[0] = &h
	s.Recs[1].(*event.Process).Time = 1 * sec
	return s
}

// instanceOf finds the process instance of pid that started at start.
func instanceOf(tb testing.TB, r *Result, pid uint32, start uint64) *Process {
	tb.Helper()
	for i := range r.Processes {
		if p := &r.Processes[i]; p.PID == pid && p.Start == start {
			return p
		}
	}
	require.FailNow(tb, "no process instance", "pid %d start %d", pid, start)
	return nil
}

func TestNVMLTwoDevices(t *testing.T) {
	// Run mode, pid 100 on two devices (40 and 80 GiB). Ticks at 2, 10, 20
	// and 30 s; allocations at 5 s (1 GiB, device 0) and 15 s (2 GiB,
	// device 1), the first freed at 25 s. The process's peak is 3 GiB at
	// 15 s; device 0 peaks at 5 s, device 1 at 15 s.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Add(&event.NVMLStatus{Time: 1 * sec, Available: true},
		&event.DeviceInfo{Index: 0, Name: "NVIDIA A100", UUID: "GPU-a", TotalBytes: 40 * GiB, Time: 1 * sec},
		&event.DeviceInfo{Index: 1, Name: "NVIDIA H100", UUID: "GPU-b", TotalBytes: 80 * GiB, Time: 1 * sec},
		nvmlSample(2*sec, 0, 40*GiB, GiB, 100, 500*MiB),
		nvmlSample(2*sec, 1, 80*GiB, 512*MiB))
	s.AllocOn(5*sec, 0xa, GiB, 1, 100, 0)
	s.Add(nvmlSample(10*sec, 0, 40*GiB, 2560*MiB, 100, 1536*MiB),
		nvmlSample(10*sec, 1, 80*GiB, 812*MiB, 100, 300*MiB))
	s.AllocOn(15*sec, 0xb, 2*GiB, 1, 100, 1)
	s.Add(nvmlSample(20*sec, 0, 40*GiB, 2560*MiB, 100, 1536*MiB),
		nvmlSample(20*sec, 1, 80*GiB, 2860*MiB, 100, 2348*MiB))
	s.Free(25*sec, 0xa)
	s.Add(nvmlSample(30*sec, 0, 40*GiB, 1536*MiB, 100, 512*MiB),
		nvmlSample(30*sec, 1, 80*GiB, 2860*MiB, 100, 2348*MiB))
	s.End(40 * sec)
	r := mustAnalyze(t, Options{}, s.Recs)

	assert.Equal(t, &NVML{Available: true, Samples: 8}, r.NVML)
	require.Len(t, r.Devices, 2)
	d0, d1 := r.Devices[0], r.Devices[1]
	assert.Equal(t, "NVIDIA A100", d0.Name)
	assert.Equal(t, "GPU-b", d1.UUID)
	assert.Equal(t, 80*GiB, d1.CapacityBytes)
	// Device 0 peaked at 5 s: the sample at 2 s is the one before it. Its
	// most used is 2560 MiB, first at 10 s (20 s ties).
	assert.Equal(t, &DeviceNVML{Samples: 4,
		AtPeak: &DeviceSample{Time: 2 * sec, UsedBytes: GiB, FreeBytes: 39 * GiB, TotalBytes: 40 * GiB},
		Max:    DeviceSample{Time: 10 * sec, UsedBytes: 2560 * MiB, FreeBytes: 40*GiB - 2560*MiB, TotalBytes: 40 * GiB},
		Last:   DeviceSample{Time: 30 * sec, UsedBytes: 1536 * MiB, FreeBytes: 40*GiB - 1536*MiB, TotalBytes: 40 * GiB},
	}, d0.NVML)
	// Device 1 peaked at 15 s: the sample at 10 s.
	assert.Equal(t, 812*MiB, d1.NVML.AtPeak.UsedBytes)
	assert.Equal(t, 10*sec, d1.NVML.AtPeak.Time)
	assert.Equal(t, 2860*MiB, d1.NVML.Max.UsedBytes)

	p := process(t, r, 100)
	// Ticks: 2 s (500 MiB, nothing traced), 10 s (1536 + 300 MiB vs 1 GiB
	// traced), 20 s (1536 + 2348 vs 3 GiB), 30 s (512 + 2348 vs 2 GiB).
	require.NotNil(t, p.NVML)
	assert.Equal(t, uint64(4), p.NVML.Samples)
	assert.Equal(t, Reconciliation{Time: 30 * sec, NVMLBytes: 2860 * MiB, TracedBytes: 2 * GiB,
		GapBytes: int64(812 * MiB)}, p.NVML.Latest)
	// The peak (3 GiB at 15 s): the tick at 10 s.
	assert.Equal(t, &Reconciliation{Time: 10 * sec, NVMLBytes: 1836 * MiB, TracedBytes: GiB,
		GapBytes: int64(812 * MiB)}, p.NVML.AtPeak)
	// Run mode, the launched command: nothing predates the trace, whatever
	// NVML says (500 MiB at the first tick is its context).
	assert.Equal(t, Preexisting{Basis: PreexistingNone}, p.Preexisting)
}

func TestNVMLGapCanBeNegative(t *testing.T) {
	// NVML lags: 1 GiB traced at 5 s, the tick at 6 s sizes the process at
	// 256 MiB. The gap is 256 MiB - 1 GiB = -768 MiB, reported as is.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Add(&event.NVMLStatus{Time: 1, Available: true})
	s.Alloc(5*sec, 0xa, GiB, 1)
	s.Add(nvmlSample(6*sec, 0, 40*GiB, GiB, 100, 256*MiB)).End(7 * sec)
	r := mustAnalyze(t, Options{}, s.Recs)
	p := process(t, r, 100)
	want := Reconciliation{Time: 6 * sec, NVMLBytes: 256 * MiB, TracedBytes: GiB, GapBytes: -768 * int64(MiB)}
	assert.Equal(t, want, p.NVML.Latest)
	assert.Nil(t, p.NVML.AtPeak, "no tick at or before the peak at 5 s")
}

func TestNVMLUnavailableAndOff(t *testing.T) {
	s := attachStream().Stack(1, "f", 1)
	s.Add(&event.NVMLStatus{Time: 1, Reason: "NVML unavailable: nvmlInit: Driver Not Loaded"})
	s.Alloc(2*sec, 0xa, MiB, 1).End(3 * sec)
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Equal(t, &NVML{Reason: "nvmlInit: Driver Not Loaded"}, r.NVML, "the prefix is the renderers'")
	p := process(t, r, 100)
	assert.Nil(t, p.NVML)
	assert.Equal(t, Preexisting{Basis: PreexistingUnknown}, p.Preexisting, "attached, no NVML figure")
	assert.Nil(t, r.Devices[0].NVML)

	off := attachStream().Stack(1, "f", 1)
	off.Alloc(2*sec, 0xa, MiB, 1).End(3 * sec)
	r = mustAnalyze(t, Options{}, off.Recs)
	assert.Nil(t, r.NVML, "no NVML record: NVML was off")
}

func TestNVMLInterruption(t *testing.T) {
	s := eventtest.NewStream()
	s.Add(&event.NVMLStatus{Time: 1, Available: true},
		&event.NVMLStatus{Time: 2, Reason: "NVML unavailable: device 0: GPU is lost"},
		&event.NVMLStatus{Time: 3, Available: true})
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Equal(t, &NVML{Available: true, Interruptions: 1, LastError: "device 0: GPU is lost"}, r.NVML)
}

// TestNVMLProcessesNote: a device NVML lists no processes on (its
// DeviceInfo written again with a ProcessesNote) keeps its figures and
// gives one line of NVML.Notes; the process has no NVML figure.
func TestNVMLProcessesNote(t *testing.T) {
	const note = "per-process figures not available: nvmlDeviceGetComputeRunningProcesses: Not Supported"
	s := eventtest.NewStream().Stack(1, "f", 1)
	info := &event.DeviceInfo{Index: 0, Name: "NVIDIA H100", UUID: "GPU-a", TotalBytes: 80 * GiB, Time: 1 * sec}
	noted := *info
	noted.ProcessesNote = note
	s.Add(&event.NVMLStatus{Time: 1 * sec, Available: true}, info, &noted)
	s.Alloc(2*sec, 0xa, GiB, 1)
	s.Add(nvmlSample(3*sec, 0, 80*GiB, GiB+300*MiB)).End(4 * sec)
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Equal(t, &NVML{Available: true, Samples: 1, Notes: []string{"NVML device 0: " + note}}, r.NVML)
	require.Len(t, r.Devices, 1)
	require.NotNil(t, r.Devices[0].NVML)
	assert.Equal(t, GiB+300*MiB, r.Devices[0].NVML.Last.UsedBytes)
	assert.Nil(t, process(t, r, 100).NVML)
}

// TestNVMLAbsent: a process NVML sampled but never sized says why in one
// line (Process.NVMLAbsent); one it sized, or a trace without NVML, says
// nothing.
func TestNVMLAbsent(t *testing.T) {
	const note = "per-process figures not available: nvmlDeviceGetComputeRunningProcesses: Not Supported"
	info := &event.DeviceInfo{Index: 0, Name: "NVIDIA H100", UUID: "GPU-a", TotalBytes: 80 * GiB, Time: 1 * sec}
	noted := *info
	noted.ProcessesNote = note
	tests := []struct {
		name    string
		stream  func() *eventtest.Stream
		samples []*event.Sample
		want    string
	}{
		{"sized", eventtest.NewStream, []*event.Sample{nvmlSample(3*sec, 0, 80*GiB, 2*GiB, 100, GiB+300*MiB)}, ""},
		{"listed without a size", eventtest.NewStream, []*event.Sample{
			nvmlSample(3*sec, 0, 80*GiB, 2*GiB, 100, 0), nvmlSample(4*sec, 0, 80*GiB, 2*GiB, 100, 0)},
			"NVML listed it in 2 samples without a size (NVML_VALUE_NOT_AVAILABLE: a container without the host's process table, or Windows WDDM)"},
		{"never listed", eventtest.NewStream, []*event.Sample{
			nvmlSample(3*sec, 0, 80*GiB, 2*GiB, 7, GiB), nvmlSample(4*sec, 0, 80*GiB, 2*GiB, 7, GiB), nvmlSample(5*sec, 0, 80*GiB, 2*GiB)},
			"NVML never listed it in the 3 samples taken while it was traced: no CUDA context on a sampled GPU then, " +
				"or NVML knows it by another PID (a container's PID namespace)"},
		{"no process lists", func() *eventtest.Stream { return eventtest.NewStream().Add(&noted) },
			[]*event.Sample{nvmlSample(3*sec, 0, 80*GiB, 2*GiB)},
			"NVML listed no processes on the devices it sampled (the NVML note says why)"},
		// Attached at 1 s: the one sample, at 0.5 s, came before.
		{"no sample while traced", attachStream, []*event.Sample{nvmlSample(sec/2, 0, 80*GiB, 2*GiB)},
			"no NVML sample was taken while it was traced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.stream().Stack(1, "f", 1)
			s.Add(&event.NVMLStatus{Time: sec / 4, Available: true}, info)
			for _, smp := range tt.samples {
				s.Add(smp)
			}
			s.Alloc(2*sec, 0xa, GiB, 1)
			s.End(6 * sec)
			r := mustAnalyze(t, Options{}, s.Recs)
			p := process(t, r, 100)
			assert.Equal(t, tt.want, p.NVMLAbsent)
			assert.Equal(t, tt.want == "", p.NVML != nil, "NVML figure")
		})
	}
}

func TestPreexisting(t *testing.T) {
	tests := []struct {
		name  string
		build func() *eventtest.Stream
		want  Preexisting
	}{
		{
			// Attached at 1 s: a free of memory from before (size unknown),
			// 1 GiB traced at 3 s; NVML says 3 GiB at 4 s: 2 GiB estimated.
			// A later tick does not change it.
			name: "attach: NVML minus traced at the first tick",
			build: func() *eventtest.Stream {
				s := attachStream().Stack(1, "f", 1)
				s.Free(2*sec, 0xdead).Alloc(3*sec, 0xa, GiB, 1)
				return s.Add(nvmlSample(4*sec, 0, 40*GiB, 4*GiB, 100, 3*GiB),
					nvmlSample(5*sec, 0, 40*GiB, 9*GiB, 100, 8*GiB))
			},
			want: Preexisting{Basis: PreexistingEstimate, Bytes: 2 * GiB,
				At: &Reconciliation{Time: 4 * sec, NVMLBytes: 3 * GiB, TracedBytes: GiB, GapBytes: int64(2 * GiB)}},
		},
		{
			// NVML lags behind 1 GiB traced: 512 MiB - 1 GiB clamps at 0.
			name: "attach: a negative gap clamps at 0",
			build: func() *eventtest.Stream {
				s := attachStream().Stack(1, "f", 1).Alloc(3*sec, 0xa, GiB, 1)
				return s.Add(nvmlSample(4*sec, 0, 40*GiB, GiB, 100, 512*MiB))
			},
			want: Preexisting{Basis: PreexistingEstimate,
				At: &Reconciliation{Time: 4 * sec, NVMLBytes: 512 * MiB, TracedBytes: GiB, GapBytes: -512 * int64(MiB)}},
		},
		{
			name: "run: the launched command has none, whatever NVML says",
			build: func() *eventtest.Stream {
				s := eventtest.NewStream().Stack(1, "f", 1).Alloc(3*sec, 0xa, GiB, 1)
				return s.Add(nvmlSample(4*sec, 0, 40*GiB, 4*GiB, 100, 3*GiB))
			},
			want: Preexisting{Basis: PreexistingNone},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustAnalyze(t, Options{}, tt.build().End(10*sec).Recs)
			assert.Equal(t, tt.want, process(t, r, 100).Preexisting)
		})
	}
}

func TestPreexistingRunModeChildren(t *testing.T) {
	// Run mode: 101 is forked by the traced 100 (traced from its start);
	// 102's parent (1) is not traced, so it was found running: estimated.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Add(&event.Process{PID: 101, PPID: 100, Time: 1 * sec}, &event.Process{PID: 102, PPID: 1, Time: 1 * sec})
	s.AllocOn(2*sec, 0xa, GiB, 1, 101, 0).AllocOn(2*sec, 0xa, GiB, 1, 102, 0)
	s.Add(nvmlSample(3*sec, 0, 40*GiB, 5*GiB, 101, 2*GiB, 102, 3*GiB)).End(4 * sec)
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Equal(t, Preexisting{Basis: PreexistingNone}, process(t, r, 101).Preexisting)
	assert.Equal(t, Preexisting{Basis: PreexistingEstimate, Bytes: 2 * GiB,
		At: &Reconciliation{Time: 3 * sec, NVMLBytes: 3 * GiB, TracedBytes: GiB, GapBytes: int64(2 * GiB)}},
		process(t, r, 102).Preexisting)
}

func TestPIDReuseStartsANewInstance(t *testing.T) {
	// Run mode. pid 101, forked by 100 at 1 s: 1 GiB at 0xa (2 s, never
	// freed), 256 MiB at 0xb (3 s) freed at 4 s. Its PID is reused at 5 s:
	// 512 MiB at 0xa again (6 s), a free of 0xb (7 s: the old instance's
	// address, unknown here). An NVML tick at 8 s lists 101: the new one.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Add(&event.Process{PID: 101, PPID: 100, Command: []string{"worker", "1"}, Time: 1 * sec})
	s.AllocOn(2*sec, 0xa, GiB, 1, 101, 0).AllocOn(3*sec, 0xb, 256*MiB, 1, 101, 0).FreeOn(4*sec, 0xb, 101)
	s.Add(&event.Process{PID: 101, PPID: 100, Command: []string{"worker", "2"}, Time: 5 * sec})
	s.AllocOn(6*sec, 0xa, 512*MiB, 1, 101, 0).FreeOn(7*sec, 0xb, 101)
	s.Add(nvmlSample(8*sec, 0, 40*GiB, 2*GiB, 101, 700*MiB)).End(9 * sec)
	r := mustAnalyze(t, Options{}, s.Recs)

	old, cur := instanceOf(t, r, 101, 1*sec), instanceOf(t, r, 101, 5*sec)
	assert.Equal(t, []string{"worker", "1"}, old.Command)
	assert.Equal(t, []string{"worker", "2"}, cur.Command)
	assert.Equal(t, 5*sec, old.SupersededAt)
	assert.Zero(t, cur.SupersededAt)
	// The old instance keeps its figures: 1 GiB live at its end, leaked.
	assert.Equal(t, Totals{Allocations: 2, Frees: 1, AllocatedBytes: GiB + 256*MiB, FreedBytes: 256 * MiB,
		PeakBytes: GiB + 256*MiB, PeakTime: 3 * sec, LiveBytesAtEnd: GiB, LiveAllocationsAtEnd: 1}, old.Totals)
	// The new one: 0xa is its own (no replacement), 0xb unknown.
	assert.Equal(t, Totals{Allocations: 1, UnknownFrees: 1, AllocatedBytes: 512 * MiB,
		PeakBytes: 512 * MiB, PeakTime: 6 * sec, LiveBytesAtEnd: 512 * MiB, LiveAllocationsAtEnd: 1}, cur.Totals)
	assert.Nil(t, old.NVML, "the tick came after the reuse")
	assert.Equal(t, Reconciliation{Time: 8 * sec, NVMLBytes: 700 * MiB, TracedBytes: 512 * MiB,
		GapBytes: int64(188 * MiB)}, cur.NVML.Latest)
	assert.Equal(t, Preexisting{Basis: PreexistingNone}, cur.Preexisting, "forked by the traced 100")

	// The old instance's memory died with it: out of the all-process
	// figures when the new one started. Peak: 1.25 GiB at 3 s.
	assert.Equal(t, 512*MiB, r.Totals.LiveBytesAtEnd)
	assert.Equal(t, uint64(1), r.Totals.LiveAllocationsAtEnd)
	assert.Equal(t, GiB+256*MiB, r.Totals.PeakBytes)
	assert.Equal(t, 512*MiB, r.Devices[0].LiveBytesAtEnd)
	assert.Equal(t, 512*MiB, r.Books.Runtime.LiveBytesAtEnd)

	// Classes and timelines name the pid, told apart by ProcessStart.
	var live = map[uint64]uint64{}
	for _, c := range r.Classes {
		if c.PID == 101 {
			live[c.ProcessStart] += c.Live.Bytes
		}
	}
	assert.Equal(t, map[uint64]uint64{1 * sec: GiB, 5 * sec: 512 * MiB}, live)
	var tls []Timeline
	for _, tl := range r.Timelines {
		if tl.PID == 101 {
			tls = append(tls, tl)
		}
	}
	require.Len(t, tls, 2)
	assert.Equal(t, 1*sec, tls[0].ProcessStart)
	assert.Equal(t, Point{Time: 4 * sec, Bytes: GiB}, tls[0].Points[len(tls[0].Points)-1])
	assert.Equal(t, 5*sec, tls[1].ProcessStart)
	assert.Equal(t, []Point{{Time: 6 * sec, Bytes: 512 * MiB}}, tls[1].Points)
	// The old instance's leak is its own finding.
	for _, f := range findings(r, KindPeak) {
		if f.PID == 101 {
			assert.Contains(t, []uint64{1 * sec, 5 * sec}, f.ProcessStart)
		}
	}
}

func TestProcessRecordAfterEventsDescribesThatProcess(t *testing.T) {
	// Events of 101 before its record (a hand-made stream): the record
	// describes the process the events implied, it does not start another.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.AllocOn(2*sec, 0xa, GiB, 1, 101, 0)
	s.Add(&event.Process{PID: 101, PPID: 100, Command: []string{"w"}, Time: 3 * sec})
	s.FreeOn(4*sec, 0xa, 101).End(5 * sec)
	r := mustAnalyze(t, Options{}, s.Recs)
	p := process(t, r, 101)
	assert.Equal(t, []string{"w"}, p.Command)
	assert.Equal(t, 2*sec, p.Start, "its first event, before the record's time")
	assert.Equal(t, uint64(1), p.Totals.Frees)
	n := 0
	for _, q := range r.Processes {
		if q.PID == 101 {
			n++
		}
	}
	assert.Equal(t, 1, n)
}

func TestExec(t *testing.T) {
	// Run mode. 101 is forked by 100 at 1 s and described again at 2 s
	// (an exec, before any CUDA call): one process, named for what it
	// runs. It allocates 1 GiB at 3 s, and is described again at 4 s (an
	// exec after using CUDA: its memory died with the old image): a new
	// instance, traced from its start like the one before.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Add(&event.Process{PID: 101, PPID: 100, Command: []string{"python", "train.py"}, Time: 1 * sec},
		&event.Process{PID: 101, PPID: 100, Command: []string{"sh", "-c", "x"}, Time: 2 * sec})
	s.AllocOn(3*sec, 0xa, GiB, 1, 101, 0)
	s.Add(&event.Process{PID: 101, PPID: 1, Command: []string{"./steady"}, Time: 4 * sec})
	s.AllocOn(5*sec, 0xa, MiB, 1, 101, 0).End(6 * sec)
	r := mustAnalyze(t, Options{}, s.Recs)

	first, second := instanceOf(t, r, 101, 1*sec), instanceOf(t, r, 101, 4*sec)
	assert.Len(t, r.Processes, 3, "100 and two instances of 101")
	assert.Equal(t, []string{"sh", "-c", "x"}, first.Command)
	assert.Equal(t, GiB, first.Totals.LiveBytesAtEnd)
	assert.Equal(t, 4*sec, first.SupersededAt)
	assert.Equal(t, []string{"./steady"}, second.Command)
	assert.Equal(t, MiB, second.Totals.LiveBytesAtEnd)
	assert.Equal(t, PreexistingNone, second.Preexisting.Basis, "an exec'd image of a process traced from its start")
	assert.Equal(t, MiB, r.Totals.LiveBytesAtEnd)
}
