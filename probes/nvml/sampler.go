package nvml

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/probes/event"
)

// DefaultLibraryPath is the NVML library Open loads unless told otherwise:
// the soname the NVIDIA driver installs, found by the dynamic loader.
const DefaultLibraryPath = "libnvidia-ml.so.1"

// DefaultInterval is how often Run samples unless told otherwise. NVML's
// memory figures are cheap to read (tens of microseconds a device), and
// 100 ms is short enough to catch the step of one training iteration.
const DefaultInterval = 100 * time.Millisecond

// Sentinel errors; test with errors.Is.
var (
	// ErrUnavailable means there are no device-layer figures on this
	// machine: the NVML library is missing, nvmlInit failed (no driver),
	// or there is no device. The error's text says which, in one line.
	ErrUnavailable = errors.New("NVML unavailable")
	// ErrNotSupported matches an *Error for NVML_ERROR_NOT_SUPPORTED: the
	// device or driver cannot answer that query. It also matches a call to
	// a function the library does not export.
	ErrNotSupported = errors.New("not supported by this device or driver")
	// ErrClosed is returned by Sample after Close.
	ErrClosed = errors.New("NVML sampler closed")
)

// codeNotSupported is NVML_ERROR_NOT_SUPPORTED, part of NVML's ABI.
const codeNotSupported = 3

// Error is an NVML call that did not return NVML_SUCCESS, converted where
// it entered the code.
type Error struct {
	Func string // the NVML function, "nvmlInit"
	Code int    // its nvmlReturn_t
	Text string // what nvmlErrorString says about Code, "Driver Not Loaded"
}

func (e *Error) Error() string { return e.Func + ": " + e.Text }

// Is makes an Error for NVML_ERROR_NOT_SUPPORTED match ErrNotSupported.
func (e *Error) Is(target error) bool {
	return target == ErrNotSupported && e.Code == codeNotSupported
}

// Library is the part of NVML the Sampler uses. The production one is
// go-nvml over libnvidia-ml.so.1; tests and other sources of device figures
// may supply their own through Options.Library. Methods return Go errors,
// never NVML return codes. After a failed Init no other method is called.
type Library interface {
	Init() error
	Shutdown() error
	DeviceCount() (int, error)
	Device(index int) (Device, error)
}

// Device is one GPU's handle in a Library.
type Device interface {
	Name() (string, error)
	UUID() (string, error)
	// PCIBusID is the device's PCI address ("00000000:3B:00.0"),
	// dcgm-exporter's pci_bus_id label. It may fail (a library without
	// it): the address is then empty, and nothing else changes.
	PCIBusID() (string, error)
	// MemoryInfo is nvmlDeviceGetMemoryInfo_v2 where the library has it,
	// else nvmlDeviceGetMemoryInfo (Reserved 0, counted in Used).
	MemoryInfo() (Memory, error)
	// ComputeProcesses and GraphicsProcesses are NVML's two running
	// process lists. A process using both contexts appears in both.
	ComputeProcesses() ([]Process, error)
	GraphicsProcesses() ([]Process, error)
}

// Memory is one device's memory, in bytes.
type Memory struct {
	Total    uint64
	Reserved uint64 // held by the driver, in neither Used nor Free (v2 only)
	Free     uint64
	Used     uint64
}

// Process is one entry of a running process list.
type Process struct {
	PID       uint32
	UsedBytes uint64 // UsedUnknown when NVML cannot tell
	// GPUInstance and ComputeInstance identify a MIG partition;
	// math.MaxUint32 when the device is not partitioned.
	GPUInstance     uint32
	ComputeInstance uint32
}

// UsedUnknown is Process.UsedBytes when NVML cannot tell a process's usage
// (NVML_VALUE_NOT_AVAILABLE: containers without access to the host's
// process table, Windows WDDM).
const UsedUnknown = math.MaxUint64

// Options configures Open. The zero value samples every process on every
// device through DefaultLibraryPath.
type Options struct {
	// LibraryPath is the NVML library to load: a soname the dynamic
	// loader searches for, or a file path. Default DefaultLibraryPath.
	LibraryPath string
	// Library replaces go-nvml altogether; LibraryPath is then unused.
	Library Library
	// PIDs, when set, keeps only the processes it returns true for in
	// Sample.Processes (the traced ones). It is called from the goroutine
	// that samples, so it must be safe for that.
	PIDs func(pid uint32) bool
	// Clock returns the time of the records Run writes and of DeviceInfo,
	// in ns. Default CLOCK_MONOTONIC, the clock of every other record.
	Clock func() uint64
}

// Sampler reads device-layer memory figures from NVML. Open one with Open;
// a Sampler must be Closed. Its methods are safe for concurrent use; Close
// waits for a sample in progress.
type Sampler struct {
	lib     Library
	pids    func(uint32) bool
	clock   func() uint64
	devices []device
	info    []event.DeviceInfo
	skipped []error

	mu     sync.Mutex // serialises NVML calls with Close
	closed bool
}

type device struct {
	index int32
	dev   Device
	// noCompute and noGraphics remember that a process list is not
	// supported, so it is not asked for again every tick.
	noCompute, noGraphics bool
	// noted says Run has written the DeviceInfo that carries the
	// device's ProcessesNote.
	noted bool
}

// Open initialises NVML and reads the name, UUID and capacity of every
// device. Errors match ErrUnavailable when there is nothing to sample; the
// text is one line naming what failed. A device that NVML lists but cannot
// describe (lost, or hidden by the container) is left out and reported by
// Skipped; Open fails only when no device is left.
func Open(opts Options) (*Sampler, error) {
	s := &Sampler{lib: opts.Library, pids: opts.PIDs, clock: opts.Clock}
	if s.lib == nil {
		path := opts.LibraryPath
		if path == "" {
			path = DefaultLibraryPath
		}
		s.lib = newGoNVML(path)
	}
	if s.clock == nil {
		s.clock = monotonicNow
	}
	if err := s.lib.Init(); err != nil {
		// After a failed nvmlInit nothing else may be called, Shutdown
		// included.
		return nil, unavailable(err)
	}
	if err := s.readDevices(); err != nil {
		_ = s.lib.Shutdown() // the first error is the one to report
		return nil, unavailable(err)
	}
	return s, nil
}

func (s *Sampler) readDevices() error {
	n, err := s.lib.DeviceCount()
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("nvmlDeviceGetCount: no NVIDIA device")
	}
	for i := range n {
		d, info, err := s.readDevice(i)
		if err != nil {
			s.skipped = append(s.skipped, fmt.Errorf("device %d: %w", i, err))
			continue
		}
		s.devices = append(s.devices, device{index: int32(i), dev: d})
		s.info = append(s.info, info)
	}
	if len(s.devices) == 0 {
		return joinErrors(s.skipped)
	}
	return nil
}

func (s *Sampler) readDevice(i int) (Device, event.DeviceInfo, error) {
	d, err := s.lib.Device(i)
	if err != nil {
		return nil, event.DeviceInfo{}, err
	}
	name, err := d.Name()
	if err != nil {
		return nil, event.DeviceInfo{}, err
	}
	uuid, err := d.UUID()
	if err != nil {
		return nil, event.DeviceInfo{}, err
	}
	m, err := d.MemoryInfo()
	if err != nil {
		return nil, event.DeviceInfo{}, err
	}
	info := event.DeviceInfo{Index: int32(i), Name: name, UUID: uuid, TotalBytes: m.Total, Time: s.clock()}
	if id, err := d.PCIBusID(); err == nil {
		info.PCIBusID = id
	}
	return d, info, nil
}

// unavailable wraps err as ErrUnavailable: "NVML unavailable: <err>".
func unavailable(err error) error {
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// Devices returns the devices Open found, by index, with what sampling has
// learnt since (ProcessesNote). The slice is the caller's.
func (s *Sampler) Devices() []event.DeviceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.info)
}

// Skipped returns why each device NVML listed but Open left out could not
// be read; usually none.
func (s *Sampler) Skipped() []error {
	return slices.Clone(s.skipped)
}

// Sample reads every device once, stamping the samples with now. A device
// that fails is left out of the result and its error joined into the
// returned error (one line, "; " between devices); the others are still
// returned. After Close it returns ErrClosed.
//
// Processes are merged from the compute and graphics lists: a process in
// both is counted once, as NVML reports one figure per process and MIG
// partition in each list. Within one device's lists, a process's usage in
// several MIG partitions is summed.
//
// A device whose compute process list is not supported (MIG partitions,
// vGPU guests) still gives its memory figures; its DeviceInfo (Devices)
// then carries a ProcessesNote that says so.
func (s *Sampler) Sample(now uint64) ([]event.Sample, error) {
	out, _, err := s.read(func() uint64 { return now })
	return out, err
}

// read is Sample with the time taken by stamp once every device has
// answered, and returned: the figures are never later than their stamp,
// and a slow call does not leave the stamp behind the figures (a process
// allocating while NVML answers would show a gap it never had).
func (s *Sampler) read(stamp func() uint64) ([]event.Sample, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, 0, ErrClosed
	}
	out := make([]event.Sample, 0, len(s.devices))
	var errs []error
	for i := range s.devices {
		d := &s.devices[i]
		sample, err := s.sampleDevice(i, d)
		if err != nil {
			errs = append(errs, fmt.Errorf("device %d: %w", d.index, err))
			continue
		}
		out = append(out, sample)
	}
	now := stamp()
	for i := range out {
		out[i].Time = now
	}
	return out, now, joinErrors(errs)
}

// sampleDevice reads the i-th device, d, leaving the sample's Time 0.
func (s *Sampler) sampleDevice(i int, d *device) (event.Sample, error) {
	m, err := d.dev.MemoryInfo()
	if err != nil {
		return event.Sample{}, err
	}
	compute, unsupported, err := processes(d.dev.ComputeProcesses, &d.noCompute)
	if err != nil {
		return event.Sample{}, err
	}
	if unsupported != nil {
		s.info[i].ProcessesNote = processesNote(unsupported)
	}
	graphics, _, err := processes(d.dev.GraphicsProcesses, &d.noGraphics)
	if err != nil {
		return event.Sample{}, err
	}
	return event.Sample{
		Device:     d.index,
		TotalBytes: m.Total,
		UsedBytes:  m.Used,
		FreeBytes:  m.Free,
		Processes:  mergeProcesses(s.pids, compute, graphics),
	}, nil
}

// processesNote is DeviceInfo.ProcessesNote for a device whose compute
// process list is not supported, err saying why. CUDA processes are in
// that list only, so the graphics list alone being unsupported (common on
// compute GPUs) takes nothing away.
func processesNote(err error) string {
	why := ""
	var e *Error
	if errors.As(err, &e) {
		// NVML's own answer: the device cannot list its processes.
		why = " (NVML lists no processes on MIG partitions and vGPU guests)"
	}
	return "per-process figures not available: " + err.Error() + why + "; the device's figures are NVML's"
}

// processes calls list unless it was found unsupported before; an
// unsupported list is empty, not an error. unsupported is the error that
// found it so, returned once.
func processes(list func() ([]Process, error), known *bool) (ps []Process, unsupported, err error) {
	if *known {
		return nil, nil, nil
	}
	ps, err = list()
	if errors.Is(err, ErrNotSupported) {
		*known = true
		return nil, err, nil
	}
	return ps, nil, err
}

// newNotes returns the DeviceInfo of each device whose ProcessesNote Run
// has not written yet, and marks them written.
func (s *Sampler) newNotes() []event.DeviceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []event.DeviceInfo
	for i := range s.devices {
		if d := &s.devices[i]; !d.noted && s.info[i].ProcessesNote != "" {
			d.noted = true
			out = append(out, s.info[i])
		}
	}
	return out
}

// mergeProcesses turns NVML's process lists into one figure per process,
// sorted by PID. A (process, MIG partition) pair in several lists is the
// same memory, so the largest figure wins; a process's partitions are
// summed. keep, when not nil, filters by PID.
func mergeProcesses(keep func(uint32) bool, lists ...[]Process) []event.ProcessUsage {
	type key struct{ pid, gi, ci uint32 }
	used := make(map[key]uint64)
	for _, list := range lists {
		for _, p := range list {
			if keep != nil && !keep(p.PID) {
				continue
			}
			b := p.UsedBytes
			if b == UsedUnknown {
				b = 0
			}
			k := key{p.PID, p.GPUInstance, p.ComputeInstance}
			used[k] = max(used[k], b)
		}
	}
	if len(used) == 0 {
		return nil
	}
	byPID := make(map[uint32]uint64, len(used))
	for k, b := range used {
		byPID[k.pid] += b
	}
	out := make([]event.ProcessUsage, 0, len(byPID))
	for pid, b := range byPID {
		out = append(out, event.ProcessUsage{PID: pid, UsedBytes: b})
	}
	slices.SortFunc(out, func(a, b event.ProcessUsage) int { return cmp.Compare(a.PID, b.PID) })
	return out
}

// Run samples every device every interval (DefaultInterval when <= 0)
// until ctx is done or the Sampler is closed, and hands each record to
// emit. emit is called from Run's goroutine, one record at a time: a caller
// that also writes records elsewhere (the probes session) must serialise
// them itself, for instance through a channel to its writer.
//
// Records, in order: an NVMLStatus (Available), the DeviceInfo of every
// device, then the Samples of each tick, the first one at once, stamped
// when the tick's last NVML call returned. A device's DeviceInfo is written
// again, before the tick's samples, when that tick found its process list
// not supported (with its ProcessesNote). When a tick
// fails for some device an NVMLStatus (not Available, with the reason) is
// emitted, and another (Available) when sampling recovers; the samples of
// the devices that did answer are emitted either way. Ticks missed while
// emit blocks are dropped, not queued. Records are not reused: emit may
// keep them.
func (s *Sampler) Run(ctx context.Context, every time.Duration, emit func(event.Record)) {
	if every <= 0 {
		every = DefaultInterval
	}
	if s.announce(emit) {
		s.sample(ctx, every, emit)
	}
}

// announce emits Run's first records: the Status and each DeviceInfo; false
// when the Sampler is closed.
func (s *Sampler) announce(emit func(event.Record)) bool {
	s.mu.Lock()
	closed := s.closed
	infos := slices.Clone(s.info)
	for i := range s.devices {
		// A note found by an earlier Sample goes out with this DeviceInfo.
		s.devices[i].noted = infos[i].ProcessesNote != ""
	}
	s.mu.Unlock()
	if closed {
		return false
	}
	emit(&event.NVMLStatus{Time: s.clock(), Available: true})
	for _, info := range infos {
		emit(&info)
	}
	return true
}

// sample is Run's loop, after announce.
func (s *Sampler) sample(ctx context.Context, every time.Duration, emit func(event.Record)) {
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	failing := "" // the reason last emitted; empty while sampling works
	for ctx.Err() == nil {
		samples, now, err := s.read(s.clock)
		if errors.Is(err, ErrClosed) {
			return
		}
		for _, info := range s.newNotes() {
			emit(&info)
		}
		for i := range samples {
			emit(&samples[i])
		}
		reason := ""
		if err != nil {
			reason = Status(now, unavailable(err)).Reason
		}
		if reason != failing {
			emit(&event.NVMLStatus{Time: now, Available: reason == "", Reason: reason})
			failing = reason
		}
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
	}
}

// StopWait is how long stop (Start's) waits for an NVML call in progress:
// a normal call takes microseconds, so the last tick is kept; a call that
// hangs (a GPU falling off the bus, a driver under load) must not hold the
// end of a recording or of serve.
const StopWait = 500 * time.Millisecond

// ErrNoAnswer is the reason written when NVML had not finished opening
// when stop was called: its first calls were still in progress.
var ErrNoAnswer = fmt.Errorf("no answer within %s of the end: an NVML call was still in progress", StopWait)

// Start samples NVML with opts into write (Open, then Run every
// DefaultInterval) in a goroutine of its own until stop is called. It
// returns once Open's records are written (the Status and each
// DeviceInfo), or after StopWait when Open takes longer, so a slow library
// never delays what the caller does next by more than that. stop waits at
// most StopWait for the goroutine; a call that is still in progress then
// is left to finish on its own, and nothing is written after stop returns. write's errors are dropped: a full disk
// shows in the caller's other writes. write is called from that goroutine
// and from stop, never concurrently.
//
// When Open fails (no library, no driver, no device) that is not an error:
// the Status record that says why is written. When Open has not returned
// by the end, the Status says so (ErrNoAnswer). err is always nil; it is
// kept for callers that may one day need it.
func Start(opts Options, write func(event.Record) error) (stop func() error, err error) {
	clock := opts.Clock
	if clock == nil {
		clock = monotonicNow
	}
	var (
		mu      sync.Mutex
		stopped bool
		opened  bool // a Status record has been written
	)
	emit := func(rec event.Record) {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			_ = write(rec)
			opened = true
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var closeErr error
	ready := make(chan struct{}) // Open's records are written
	go func() {
		defer close(done)
		s, err := Open(opts)
		if err != nil {
			emit(Status(clock(), err))
			close(ready)
			return
		}
		announced := s.announce(emit)
		close(ready)
		if announced {
			s.sample(ctx, DefaultInterval, emit)
		}
		closeErr = s.Close()
	}()
	select {
	case <-ready:
	case <-time.After(StopWait):
	}
	return func() error {
		cancel()
		select {
		case <-done:
			return closeErr
		case <-time.After(StopWait):
		}
		mu.Lock()
		defer mu.Unlock()
		if !opened {
			_ = write(Status(clock(), unavailable(ErrNoAnswer)))
		}
		stopped = true
		return nil
	}, nil
}

// Close shuts NVML down. It waits for a sample in progress; later calls to
// Sample return ErrClosed and Run returns. Closing twice is a no-op.
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.lib.Shutdown(); err != nil {
		return fmt.Errorf("shut NVML down: %w", err)
	}
	return nil
}

// Status is the record that says whether device-layer figures are
// available: Available when err is nil, else the error's text, on one line,
// as the Reason ("NVML unavailable: nvmlInit: Driver Not Loaded" for Open's
// errors). A caller writes it when Open fails; Run writes its own.
func Status(now uint64, err error) *event.NVMLStatus {
	if err == nil {
		return &event.NVMLStatus{Time: now, Available: true}
	}
	reason := strings.ReplaceAll(err.Error(), "\n", "; ")
	return &event.NVMLStatus{Time: now, Reason: reason}
}

// joinErrors is errors.Join on one line: reasons go into a status line and
// a trace record.
func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return lineErrors(errs)
}

type lineErrors []error

func (e lineErrors) Error() string {
	s := make([]string, len(e))
	for i, err := range e {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (e lineErrors) Unwrap() []error { return e }

// monotonicNow is CLOCK_MONOTONIC in ns, the clock bpf_ktime_get_ns reads
// and every other record carries.
func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
