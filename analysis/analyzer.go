package analysis

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// Defaults for Options fields left zero.
const (
	// DefaultTimelinePoints keeps a timeline small enough to embed in a
	// report yet fine enough to see phases: 512 points is one per ~2 pixels
	// of a typical chart.
	DefaultTimelinePoints = 512
	// DefaultLeakWindows: fewer than 4 windows cannot tell steady growth
	// from a step; more than 8 makes a short leak look intermittent.
	DefaultLeakWindows = 6
	// DefaultTopStacks is how many stacks a finding or a summary names.
	DefaultTopStacks = 5
	// leakResolution is the number of grid buckets the leak rule's windows
	// are cut from; window ends fall on bucket ends, so 64 buckets place them
	// within 1/32 of the run of the equal split.
	leakResolution = 64
	// maxLeakFindings caps leak findings per process: past that the report
	// lists noise, and the top ones hold most of the bytes.
	maxLeakFindings = 10
)

// ErrFinished is returned by Add after Finish.
var ErrFinished = errors.New("analysis: Add after Finish")

// Options tunes an Analyzer. The zero value uses the defaults.
type Options struct {
	// TimelinePoints is the most points a timeline keeps (default 512, at
	// least 2).
	TimelinePoints int
	// LeakWindows is the number of windows the leak rule splits the run
	// into (default 6, at least 3).
	LeakWindows int
	// TopStacks is how many stacks findings name (default 5).
	TopStacks int
	// SpikeWindow is how briefly, in ns, a device allocation must live to
	// be a spike candidate (default DefaultSpikeWindow).
	SpikeWindow uint64
	// ChurnWindow is how soon, in ns, a released segment's size must be
	// allocated again to count as a churn cycle (default
	// DefaultChurnWindow).
	ChurnWindow uint64
	// Capacity, when set, is every device's memory size in bytes for the
	// leak's projected time to out-of-memory, over NVML's DeviceInfo.
	Capacity uint64
	// IterationLog is the most entries each of the iteration detector's
	// logs keeps (default DefaultIterationLog, at least 64): per stack,
	// the allocations (then their burst starts) and the live-bytes
	// changes.
	// It bounds the Analyzer's memory per site, whatever the stream's
	// length; a long-lived consumer (vramprof serve) sets it lower.
	IterationLog int
	// Watch, when set, is called with every allocation made live or let
	// go, in every layer and memory space, in stream order, once the
	// analysis counted it (see Change). The Change is valid during the
	// call only.
	Watch func(*Change)
}

func (o Options) withDefaults() Options {
	if o.TimelinePoints <= 0 {
		o.TimelinePoints = DefaultTimelinePoints
	}
	o.TimelinePoints = max(o.TimelinePoints, 2)
	if o.LeakWindows <= 0 {
		o.LeakWindows = DefaultLeakWindows
	}
	o.LeakWindows = max(o.LeakWindows, 3)
	if o.TopStacks <= 0 {
		o.TopStacks = DefaultTopStacks
	}
	if o.SpikeWindow == 0 {
		o.SpikeWindow = DefaultSpikeWindow
	}
	if o.ChurnWindow == 0 {
		o.ChurnWindow = DefaultChurnWindow
	}
	if o.IterationLog <= 0 {
		o.IterationLog = DefaultIterationLog
	}
	o.IterationLog = max(o.IterationLog, 64)
	return o
}

// Analyzer folds an event stream into a Result. Feed it every record in
// stream order with Add, then call Finish once. An Analyzer is not safe for
// concurrent use. It copies what it keeps, so the producer may reuse records
// after Add returns.
type Analyzer struct {
	opts     Options
	finished bool
	result   *Result

	// run accumulates the run facts; Finish completes End and Duration.
	run Run
	// haveStart is set once the time origin is known (Header or first time).
	haveStart bool
	// lost is the last Lost record's running total; late its count of
	// events written out of effect order.
	lost, late uint64
	lostCauses event.LostCauses
	// stops are the End record's stop counts (event.End.Stops), by PID
	// and start time; nil when it did not count them.
	stops map[event.ProcessStops]uint64
	// latest is the latest time seen in any record: the end of a stream cut
	// short.
	latest uint64

	// leak is the leak histories' grid, from the first event on.
	leak *grid
	// ranges are, per process, the device address span each known device
	// handed out: the address-range cross-check for unknown devices.
	ranges map[uint32]map[int32]*addrRange
	// lastRange caches the latest range widened, lastRangeKey its owner.
	lastRange    *addrRange
	lastRangeKey rangeOwner
	// lastEvent is the latest event time: leak windows end there.
	lastEvent uint64
	// loops are the processes' loops by instance id (Finish).
	loops map[uint32]*loop

	// ledger holds every live allocation of every process instance, layer
	// and memory space, the process instances and the VMM handles and
	// mappings; the aggregates below are kept beside it.
	ledger *ledger.Ledger
	// classes are the allocation classes in order of first use; classIx
	// finds them. Indexes (int32) are stable and stored in the ledger's
	// entries (Entry.Tag).
	classes []*classState
	classIx classTable
	// groups are the stacks per process and scope, likewise indexed.
	groups  []*groupState
	groupIx map[groupKey]int32
	// accounts are the per-process models; naccounts counts them (their
	// indexes, account.ix).
	accounts  map[accountKey]*account
	naccounts int32
	// last caches the latest accounts: consecutive events mostly come from
	// one process, alternating between its layers, and the lookup is on
	// the hot path. Their keys are kept beside them: the scan reads this
	// array only. layerAt and lastDevs do the same for layers and
	// devices.
	last     [2]lastAccount
	layerAt  [8]*layerState // by scope index (scopeIndex)
	lastDevs [2]*devState
	// layers and devices hold the all-process figures.
	layers  map[scope]*layerState
	devices map[devKey]*devState
	// seenDevices are the device indexes any segment-layer event carried;
	// capacity the sizes DeviceInfo records gave.
	seenDevices map[int32]bool
	capacity    map[int32]uint64
	// pids are the process instances (ids, see instances.go) any
	// segment-layer event came from.
	pids map[uint32]bool
	// lastPID and lastDevice are the latest entries made in pids and
	// seenDevices (valid when seenLast says so): the hot path skips the
	// lookups while they stay the same.
	lastPID    uint32
	lastDevice int32
	seenLast   struct{ pid, device bool }
	// insts are the analysis's facts about process instances by id (the
	// instances themselves are the ledger's); inst and Finish complete
	// them from the ledger.
	insts map[uint32]*instance
	// procIndex finds an instance's entry in Result.Processes (Finish).
	procIndex map[uint32]int
	// oomGeometry is the segments' geometry at each failed segment
	// allocation of Result.Pools, by OOM.Index (Finish).
	oomGeometry map[int]oomGeometry

	// nvml is the device layer (NVML): status, devices and samples.
	nvml nvmlState

	// books are the per-API books, per process and overall (books.go).
	books *bookModel

	// vmm is the VMM figures and reservations (vmm.go; the physical
	// handles and mapped ranges are the ledger's).
	vmm *vmmModel

	// pools are the segment/block geometry per process and device (see
	// fragmentation.go); churn the segment traffic per process instance.
	// Both are observers: they see each device-memory allocation and free
	// after the ledger applied it (observe). deviceCall calls them
	// directly, not through a slice of observers: a call through an
	// interface cannot be inlined, and most events need only a test of
	// each. deviceChange is the change they are fed: one buffer, passed
	// by pointer, not a copy per call.
	pools        *poolModel
	churn        *churnModel
	deviceChange ledger.Change
	// scopes are the allocator release scopes in flight per thread
	// (scopes.go): a segment release inside one takes its stack.
	scopes scopeModel

	// spikes are the short-lived device allocations per site (spikes.go),
	// timelines each process's live bytes over time (timelines.go), iters
	// the logs iteration detection reads (iterations.go): liveObservers,
	// fed every allocation made live or let go (notify calls them
	// directly, as deviceCall its observers); live are any others (a
	// test's).
	spikes    *spikeModel
	timelines *timelineModel
	iters     *iterationModel
	live      []liveObserver
	// liveChange is the change being fed to them: one buffer, passed by
	// pointer, not a copy per observer.
	liveChange liveChange
	// watched is the change fed to Options.Watch, one buffer too.
	watched Change

	// Copies of the descriptive records, by key.
	stacks    map[event.StackID]*event.Stack
	mappings  map[event.MappingID]event.Mapping
	libraries map[libKey]bool // dedupes Library records
}

// scope is what one set of totals counts: a layer and, at the segment
// layer, device memory (allocations and physical memory together) or pinned
// host memory. Host memory has its own totals, peak and timelines.
type scope struct {
	layer event.Layer
	host  bool
}

// deviceScope is report.json's "totals": device memory at the segment layer.
var deviceScope = scope{layer: event.LayerSegment}

// hostScope is pinned host memory.
var hostScope = scope{layer: event.LayerSegment, host: true}

// blockScope is the block layer: a caching allocator's blocks (tensors).
var blockScope = scope{layer: event.LayerBlock}

func scopeOf(layer event.Layer, mem MemorySpace) scope {
	return scope{layer: layer, host: mem == SpaceHost}
}

// classKey is an allocation class: what one pprof sample aggregates.
type classKey struct {
	size   uint64
	pid    uint32
	stack  event.StackID
	device int32
	api    event.API
	layer  event.Layer
	mem    MemorySpace
}

// classState is a class's running aggregates.
type classState struct {
	key   classKey
	group int32
	// dirty is set when the class was touched since the account's last
	// peak. The flags sit beside group, in its word's padding: the
	// state is 96 bytes, not 112 (a class per site and size).
	dirty bool
	// devDirty: touched since its device's last peak; retired is set
	// when its process instance left the all-process figures (see
	// retire).
	devDirty bool
	retired  bool
	alloc    Usage
	live     Usage
	peak     Usage // live at the account's last peak, valid when !dirty
	// devPeak is live at its device's last peak (all processes, device
	// scope), valid when !devDirty.
	devPeak Usage
}

// devLive is what the class counts in its device's all-process level.
func (c *classState) devLive() Usage {
	if c.retired {
		return Usage{}
	}
	return c.live
}

// devTouch marks a device-scope class changed since its device's last peak.
func (ds *devState) devTouch(ci int32, c *classState) {
	if !c.devDirty {
		c.devDirty = true
		ds.dirty = append(ds.dirty, ci)
	}
}

// devPeak brings the device's peak snapshot up to date at a new peak.
func (a *Analyzer) devPeak(ds *devState) {
	for _, i := range ds.dirty {
		dc := a.classes[i]
		dc.devPeak, dc.devDirty = dc.devLive(), false
	}
	ds.dirty = ds.dirty[:0]
}

// groupKey is a stack within one process and scope: the unit of the "by
// stack" aggregates and of the leak rule.
type groupKey struct {
	pid   uint32
	stack event.StackID
	sc    scope
}

// groupState is a stack's running aggregates and its live-bytes history
// for the leak rule.
type groupState struct {
	key groupKey
	// ix is the group's index in Analyzer.groups: the observers keep
	// their per-stack state by it.
	ix     int32
	alloc  Usage
	live   Usage
	failed Usage
	hist   history
}

// accountKey is one process's memory in one scope.
type accountKey struct {
	pid uint32
	sc  scope
}

// account is the model of one process in one scope. What it has live is
// the ledger's (ledger.Ledger.InstanceLevel, and each change's
// ledger.Change.Inst); its peak is kept here, as the scopes' are, since a
// flight recording's checkpoint restores it (flight.go).
type account struct {
	key accountKey
	// ix is the account's index, in order of creation: the observers keep
	// their per-process state by it.
	ix        int32
	totals    Totals
	peak      uint64
	peakTime  uint64
	peakEvent Allocation // valid when peak > 0
	// last is the latest time memory became live or went in the account:
	// the end of the process's activity there, which the leak rule's
	// steadiness test reads.
	last uint64
	// dirty lists the classes touched since the last peak. At a new peak only
	// they are copied into the peak snapshot (classState.peak): each event
	// adds at most one entry and each entry is applied once, so tracking the
	// peak costs O(events) even when every event sets a new peak.
	dirty   []int32
	devices map[int32]*procDevice
	// lastDev caches devices[lastDevIx] (the hot path).
	lastDev      *procDevice
	lastDevIx    int32
	firstFailure *Failure
	// firstOOM is the first failure that ran out of memory; errs groups
	// every failure by library and code (errors.go).
	firstOOM *Failure
	errs     map[errorKey]*callErrors
}

// procDevice is one process's use of one device.
type procDevice struct {
	live     uint64
	peak     uint64
	peakTime uint64
}

// devKey is one device in one scope, all processes together.
type devKey struct {
	device int32
	sc     scope
}

// devState is one device's level in one scope, all processes together.
// At the device scope it also lists the classes changed since the
// device's last peak, so that the live set at each device's own peak
// (Device.PeakStacks) is kept as an account's is: O(events) however often the
// peak moves.
type devState struct {
	gauge
	key   devKey
	dirty []int32
}

// gauge is a running level with its peak and when the peak was first
// reached.
type gauge struct {
	live, peak, peakTime uint64
}

func (g *gauge) add(n, t uint64) {
	g.live += n
	if g.live > g.peak {
		g.peak, g.peakTime = g.live, t
	}
}

func (g *gauge) sub(n uint64) { g.live -= n }

// layerState is one scope's totals, all processes together; seen tells
// whether any event of the scope arrived (report.json's "blocks" depends on
// it). What is live is the ledger's (ledgerScope).
type layerState struct {
	totals Totals
	seen   bool
}

// ledgerScope is the ledger's all-process scope of sc.
func ledgerScope(sc scope) ledger.Scope { return ledger.Scope{Layer: sc.layer, Host: sc.host} }

// bookKey is one API book of one process, or of all (all set, pid 0).
type bookKey struct {
	pid    uint32
	all    bool
	driver bool
}

type bookState struct {
	book  Book
	level gauge
}

// bookSpace is one key space of a book's live allocations, by address:
// the runtime's and the driver's books each see the address returned to
// them; physical handles are apart from addresses.
type bookSpace struct {
	pid      uint32
	driver   bool
	physical bool
}

// rangeKey is a reserved range of one process, by its start.
type rangeKey struct {
	pid  uint32
	addr uint64
}

type vmmRange struct {
	size   uint64
	device int32
}

// vmmKey is one VMM scope: a process or all (allPIDs), a device or all
// (allDevices).
type vmmKey struct {
	pid        uint32
	device     int32
	allPIDs    bool
	allDevices bool
}

type vmmState struct {
	counts                     VMM // counts only; bytes come from the gauges
	reserved, physical, mapped gauge
}

// libKey identifies a Library record: one per process and path.
type libKey struct {
	pid  uint32
	path string
}

// New returns an Analyzer ready for the first record.
func New(opts Options) *Analyzer {
	a := &Analyzer{
		opts:        opts.withDefaults(),
		groupIx:     make(map[groupKey]int32),
		accounts:    make(map[accountKey]*account),
		layers:      make(map[scope]*layerState),
		devices:     make(map[devKey]*devState),
		seenDevices: make(map[int32]bool),
		capacity:    make(map[int32]uint64),
		pids:        make(map[uint32]bool),
		insts:       make(map[uint32]*instance),
		ledger:      ledger.New(),
		books:       newBookModel(),
		vmm:         newVMMModel(),
		stacks:      make(map[event.StackID]*event.Stack),
		mappings:    make(map[event.MappingID]event.Mapping),
		libraries:   make(map[libKey]bool),
	}
	a.classIx.classes = &a.classes
	a.pools = &poolModel{pools: make(map[poolKey]*pool), ledger: a.ledger, classes: &a.classes, failed: a.segmentFailed,
		reservationStart: a.vmm.reservationStart}
	a.churn = newChurnModel(a.opts.ChurnWindow)
	a.spikes = &spikeModel{window: a.opts.SpikeWindow}
	a.timelines = newTimelineModel(a.opts.TimelinePoints)
	a.iters = newIterationModel(a.opts.IterationLog)
	return a
}

// Add consumes one record. It returns an error for a nil or unknown record
// and after Finish; the Analyzer stays usable after an error.
func (a *Analyzer) Add(rec event.Record) error {
	if a.finished {
		return ErrFinished
	}
	switch r := rec.(type) {
	case *event.Event:
		if r == nil {
			return errors.New("analysis: nil *event.Event")
		}
		a.event(r)
	case *event.Stack:
		if r != nil {
			s := *r
			s.Frames = slices.Clone(r.Frames)
			a.stacks[r.ID] = &s
		}
	case *event.Mapping:
		if r != nil {
			a.mappings[r.ID] = *r
		}
	case *event.DeviceInfo:
		if r != nil {
			a.seenDevices[r.Index] = true
			a.capacity[r.Index] = r.TotalBytes
			a.deviceInfo(r)
			a.see(r.Time)
		}
	case *event.Sample:
		if r != nil {
			a.sample(r)
			a.see(r.Time)
		}
	case *event.NVMLStatus:
		if r != nil {
			a.nvmlStatus(r)
			a.see(r.Time)
		}
	case *event.Process:
		if r != nil {
			a.process(r)
		}
	case *event.Library:
		if r != nil && !a.libraries[libKey{r.PID, r.Path}] {
			a.libraries[libKey{r.PID, r.Path}] = true
			l := *r
			l.Symbols = slices.Clone(r.Symbols)
			a.run.Libraries = append(a.run.Libraries, l)
		}
	case *event.Interpreter:
		if r != nil {
			a.run.Interpreters = append(a.run.Interpreters, *r)
		}
	case *event.Checkpoint:
		if r != nil {
			a.checkpoint(r)
		}
	case *event.TestPhase:
		// Which pytest test ran: report/pytests' concern, not the run's.
	case *event.Lost:
		if r != nil {
			a.lost, a.late, a.lostCauses = r.Total, r.Late, r.Causes
			a.see(r.Time)
		}
	case *event.End:
		if r != nil {
			a.run.Ended = true
			if r.StopsCounted {
				a.stops = make(map[event.ProcessStops]uint64, len(r.Stops))
				for _, s := range r.Stops {
					a.stops[event.ProcessStops{PID: s.PID, Start: s.Start}] += s.Count
				}
			}
			a.run.EndReason = r.Reason
			a.run.ExitCode = r.ExitCode
			a.run.End = r.Time
			a.see(r.Time)
		}
	case *event.Header:
		if r != nil {
			a.run.Tool = r.Tool
			a.run.Version = r.Version
			a.run.Mode = r.Mode
			a.run.Command = slices.Clone(r.Command)
			a.run.PID = r.PID
			a.run.Host = r.Host
			a.run.WallTime = r.WallTime
			if !a.haveStart {
				a.setStart(r.Start)
			}
		}
	case nil:
		return errors.New("analysis: nil record")
	default:
		return fmt.Errorf("analysis: unknown record type %T", rec)
	}
	return nil
}

func (a *Analyzer) setStart(t uint64) {
	a.haveStart = true
	a.run.Start = t
	a.latest = max(a.latest, t)
	a.timelines.start(t)
}

// see notes a time from any record: the run lasts at least until then.
func (a *Analyzer) see(t uint64) {
	if !a.haveStart {
		a.setStart(t)
	}
	a.latest = max(a.latest, t)
}

func (a *Analyzer) layer(sc scope) *layerState {
	ix := int(sc.layer) << 1
	if sc.host {
		ix |= 1
	}
	if ix < len(a.layerAt) {
		if ls := a.layerAt[ix]; ls != nil {
			ls.seen = true
			return ls
		}
	}
	ls := a.layers[sc]
	if ls == nil {
		ls = &layerState{}
		a.layers[sc] = ls
	}
	if ix < len(a.layerAt) {
		a.layerAt[ix] = ls
	}
	ls.seen = true
	return ls
}

// lastAccount is an entry of Analyzer.last: an account and its key
// (accountKey.packed).
type lastAccount struct {
	key uint64
	s   *account
}

// packed is k in one word: the caches compare it, not the fields one by
// one.
func (k accountKey) packed() uint64 { return uint64(k.pid)<<16 | k.sc.packed() }

// packed is sc in the low 16 bits of a word.
func (sc scope) packed() uint64 {
	p := uint64(sc.layer) << 8
	if sc.host {
		p |= 1
	}
	return p
}

func (a *Analyzer) account(pid uint32, sc scope) *account {
	k := accountKey{pid, sc}
	pk := k.packed()
	for i := range a.last {
		if l := &a.last[i]; l.key == pk && l.s != nil {
			return l.s
		}
	}
	s := a.accounts[k]
	if s == nil {
		s = &account{key: k, ix: a.naccounts, devices: make(map[int32]*procDevice)}
		a.accounts[k] = s
		a.naccounts++
	}
	a.last[0], a.last[1] = lastAccount{pk, s}, a.last[0]
	return s
}

func (s *account) device(d int32) *procDevice {
	if s.lastDev != nil && s.lastDevIx == d {
		return s.lastDev
	}
	pd := s.devices[d]
	if pd == nil {
		pd = &procDevice{}
		s.devices[d] = pd
	}
	s.lastDev, s.lastDevIx = pd, d
	return pd
}

func (a *Analyzer) device(d int32, sc scope) *devState {
	k := devKey{d, sc}
	for _, ds := range a.lastDevs {
		if ds != nil && ds.key == k {
			return ds
		}
	}
	ds := a.devices[k]
	if ds == nil {
		ds = &devState{key: k}
		a.devices[k] = ds
	}
	a.lastDevs[0], a.lastDevs[1] = ds, a.lastDevs[0]
	return ds
}

func (a *Analyzer) group(k groupKey) *groupState {
	if i, ok := a.groupIx[k]; ok {
		return a.groups[i]
	}
	g := &groupState{key: k, ix: int32(len(a.groups))}
	a.groupIx[k] = g.ix
	a.groups = append(a.groups, g)
	return g
}

func (a *Analyzer) class(k classKey) int32 {
	if i, ok := a.classIx.get(&k); ok {
		return i
	}
	g := a.group(groupKey{k.pid, k.stack, scopeOf(k.layer, k.mem)})
	i := int32(len(a.classes))
	a.classes = append(a.classes, &classState{key: k, group: g.ix})
	a.classIx.put(&k, i) // after the append: it reads the key there
	return i
}

// event applies one traced call to the model.
func (a *Analyzer) event(e *event.Event) {
	if e.Flags&event.FlagRestored != 0 {
		if a.run.Flight != nil {
			a.run.Flight.Restored++
		}
	} else {
		a.run.Events++
	}
	a.see(e.Time)
	if a.leak == nil {
		// Leak windows span the allocation activity itself, first event to
		// last: a process that starts late or lingers after its last call
		// (start-up, teardown, a recorder still draining) must not squeeze
		// the whole workload into one window.
		a.leak = newGrid(e.Time, leakResolution)
	}
	a.lastEvent = max(a.lastEvent, e.Time)
	id := a.ledger.Active(e.PID, e.Time)
	if id != e.PID {
		// A later instance of a reused PID: the model keys it by its own
		// id. The producer's record is left alone.
		c := *e
		c.PID = id
		e = &c
	}
	layer := e.Layer
	if layer == event.LayerUnknown {
		// The CUDA API probes are the only sources that may leave the layer
		// unset; their calls are segments.
		layer = event.LayerSegment
	}
	switch layer {
	case event.LayerSegment:
		a.segment(a.scopes.attribute(e, a.stacks))
	case event.LayerBlock:
		switch e.Kind {
		case event.KindAlloc, event.KindFree:
			a.deviceCall(e, layer)
		case event.KindOOMReport:
			a.pools.reported(e)
		case event.KindScopeBegin, event.KindScopeEnd:
			a.scopes.mark(e, a.stacks[e.Stack])
		default:
			a.layer(scope{layer: layer}).totals.IgnoredEvents++
			a.account(e.PID, scope{layer: layer}).totals.IgnoredEvents++
		}
	default:
		a.layer(scope{layer: layer}).totals.IgnoredEvents++
	}
}

// segment applies a CUDA API call. A nested call (the driver call inside a
// runtime call) is counted in its API's book only: the outer call already
// counts the memory. Every other call is counted once, in its account.
func (a *Analyzer) segment(e *event.Event) {
	if !a.seenLast.pid || a.lastPID != e.PID {
		// Consecutive events mostly come from one process: the map is
		// looked at when it changes only.
		a.pids[e.PID] = true
		a.lastPID, a.seenLast.pid = e.PID, true
	}
	if e.Kind == event.KindAlloc && e.Ret == 0 && e.Addr != 0 {
		if e.Device == event.DeviceUnknown {
			if d, ok := a.inferDevice(e.PID, e.Addr); ok {
				ev := *e
				ev.Device = d
				e = &ev
				a.run.DevicesInferred++
			}
		} else {
			a.widenRange(e.PID, e.Device, e.Addr, e.Size)
		}
	}
	switch rule := e.Kind.DeviceRule(); {
	case rule == event.DeviceNone, rule == event.DeviceHandle:
		// No device, or one that cuMemCreate's event listed already.
	case e.Kind == event.KindSetDevice && (e.Ret != 0 || e.Device == event.DeviceUnknown):
		// A failed choice names a device that may not exist
		// (cudaSetDevice(7) on four devices): nothing was on it. A
		// choice the probes could not know (a cuCtxSetCurrent of a
		// context not seen made, or destroyed) names none: what is
		// allocated after it says where, from its address.
	default:
		if !a.seenLast.device || a.lastDevice != e.Device {
			a.seenDevices[e.Device] = true
			a.lastDevice, a.seenLast.device = e.Device, true
		}
	}
	a.books.observe(e)
	if e.Flags&event.FlagNested != 0 {
		a.run.NestedEvents++
		return
	}
	const layer = event.LayerSegment
	switch e.Kind {
	case event.KindAlloc, event.KindFree:
		a.deviceCall(e, layer)
	case event.KindHostAlloc:
		a.alloc(e, layer, SpaceHost)
	case event.KindHostFree:
		a.free(e, layer, SpaceHost)
	case event.KindCreate:
		a.create(e)
	case event.KindRelease:
		a.releaseHandle(e)
	case event.KindReserve:
		a.vmm.reserve(e)
	case event.KindUnreserve:
		a.vmm.unreserve(e)
	case event.KindMap:
		a.mapRange(e)
	case event.KindUnmap:
		a.unmapRange(e)
	case event.KindSetDevice:
		a.run.DeviceSwitches++
	default:
		a.layer(deviceScope).totals.IgnoredEvents++
		a.account(e.PID, deviceScope).totals.IgnoredEvents++
	}
}

// addrRange is the span of device addresses a device handed a process.
type addrRange struct{ lo, hi uint64 }

// rangeOwner is a process and device an addrRange belongs to.
type rangeOwner struct {
	pid    uint32
	device int32
}

// widenRange records that device d gave pid memory at [addr, addr+size).
func (a *Analyzer) widenRange(pid uint32, d int32, addr, size uint64) {
	k := rangeOwner{pid, d}
	r := a.lastRange
	if r == nil || a.lastRangeKey != k {
		if a.ranges == nil {
			a.ranges = make(map[uint32]map[int32]*addrRange)
		}
		m := a.ranges[pid]
		if m == nil {
			m = make(map[int32]*addrRange)
			a.ranges[pid] = m
		}
		r = m[d]
		if r == nil {
			r = &addrRange{lo: addr, hi: addr + size}
			m[d] = r
		}
		a.lastRange, a.lastRangeKey = r, k
	}
	r.lo, r.hi = min(r.lo, addr), max(r.hi, addr+size)
}

// inferDevice cross-checks an allocation whose device was not seen (a thread
// that chose its device before an attach) against the address ranges the
// process's known devices handed out: CUDA gives each device its own part
// of the unified address space. Exactly one device's range must hold the
// address; anything else stays unknown.
func (a *Analyzer) inferDevice(pid uint32, addr uint64) (int32, bool) {
	found, n := int32(0), 0
	for d, r := range a.ranges[pid] {
		if addr >= r.lo && addr < r.hi {
			found, n = d, n+1
		}
	}
	return found, n == 1
}

// both applies f to the scope's and the process's totals.
func both(ls *layerState, sp *account, f func(t *Totals)) {
	f(&ls.totals)
	f(&sp.totals)
}

// deviceCall applies a non-nested allocation or free of device memory at
// the segment or block layer: the ledger, the aggregates, then the
// observers, which see what the ledger made of it.
func (a *Analyzer) deviceCall(e *event.Event, layer event.Layer) {
	k := liveKey(e.PID, layer, SpaceDevice)
	ch := &a.deviceChange
	if e.Kind == event.KindAlloc {
		a.ledger.AllocTo(ch, k, e)
		a.allocated(e, layer, SpaceDevice, ch)
	} else {
		a.ledger.FreeTo(ch, k, e)
		a.freed(e, layer, SpaceDevice, ch)
	}
	a.pools.observe(e, layer, ch)
	a.churn.observe(e, layer, ch)
}

// liveKey is the ledger's key space of a process instance's allocations
// in one layer and memory space.
func liveKey(pid uint32, layer event.Layer, mem MemorySpace) ledger.Key {
	return ledger.Key{Inst: pid, Layer: layer, Space: ledger.Space(mem)}
}

// alloc applies an allocation call in one memory space and reports whether
// it made memory live.
func (a *Analyzer) alloc(e *event.Event, layer event.Layer, mem MemorySpace) bool {
	ch := a.ledger.Alloc(liveKey(e.PID, layer, mem), e)
	return a.allocated(e, layer, mem, &ch)
}

// allocated applies to the aggregates what the ledger made of an
// allocation call, and reports whether it made memory live.
func (a *Analyzer) allocated(e *event.Event, layer event.Layer, mem MemorySpace, ch *ledger.Change) bool {
	sc := scopeOf(layer, mem)
	ls := a.layer(sc)
	sp := a.account(e.PID, sc)
	switch ch.Verdict {
	case ledger.Failed:
		both(ls, sp, func(t *Totals) { t.FailedAllocations++; t.FailedBytes += e.Size })
		if sc == deviceScope || sc == blockScope {
			a.iters.failed(sp.ix, e.Time, e.Stack)
		}
		g := a.group(groupKey{e.PID, e.Stack, sc})
		g.failed.Add(e.Size)
		var f *Failure
		if sp.firstFailure == nil {
			f = a.failure(e, layer, sp)
			sp.firstFailure = f
		}
		if sp.firstOOM == nil && IsOutOfMemory(e.Ret) {
			if f == nil {
				f = a.failure(e, layer, sp)
			}
			sp.firstOOM = f
		}
		sp.noteFailure(e, layer)
		return false
	case ledger.Empty:
		both(ls, sp, func(t *Totals) { t.ZeroSizeAllocations++ })
		return false
	case ledger.NoAddr:
		both(ls, sp, func(t *Totals) { t.IgnoredEvents++ })
		return false
	}
	live := Usage{Count: ch.Inst.Count, Bytes: ch.Inst.Bytes} // the process's, after the call
	if ch.Verdict == ledger.Replaced {
		// A free was missed: the old allocation went as if freed now,
		// just before the new one came.
		both(ls, sp, func(t *Totals) { t.ReplacedAllocations++ })
		a.release(ch.Old, e.Addr, e.Time, ls, sp, true, live.Bytes-e.Size)
	}
	ci := a.class(classKey{e.Size, e.PID, e.Stack, e.Device, e.API, layer, mem})
	c := a.classes[ci]
	ch.New.Tag = ci
	both(ls, sp, func(t *Totals) { t.Allocations++; t.AllocatedBytes += e.Size })

	c.alloc.Add(e.Size)
	c.live.Add(e.Size)
	a.touch(sp, ci, c)
	g := a.groups[c.group]
	g.alloc.Add(e.Size)
	g.live.Add(e.Size)
	g.hist.set(a.leak, e.Time, g.live.Bytes)

	// The peak is kept here, not read from the ledger: a flight
	// recording's checkpoint restores the peak of what it cut (flight.go).
	if live := a.ledger.ScopeLevel(ledgerScope(sc)).Bytes; live > ls.totals.PeakBytes {
		ls.totals.PeakBytes, ls.totals.PeakTime = live, e.Time
	}
	ds := a.device(e.Device, sc)
	before := ds.peak
	if sc == deviceScope {
		ds.devTouch(ci, c)
	}
	ds.add(e.Size, e.Time)
	if sc == deviceScope && ds.peak > before {
		a.devPeak(ds)
	}
	pd := sp.device(e.Device)
	pd.live += e.Size
	if pd.live > pd.peak {
		pd.peak, pd.peakTime = pd.live, e.Time
	}

	if live.Bytes > sp.peak {
		// A new peak (strictly above: the first time a value is reached
		// counts). Bring the snapshot up to date with the classes changed
		// since the last one.
		for _, i := range sp.dirty {
			dc := a.classes[i]
			dc.peak, dc.dirty = dc.live, false
		}
		sp.dirty = sp.dirty[:0]
		sp.peak, sp.peakTime = live.Bytes, e.Time
		sp.peakEvent = Allocation{Time: e.Time, Addr: e.Addr, Size: e.Size,
			Device: e.Device, API: e.API, Layer: layer, Stack: e.Stack}
	}
	a.notify(g, sp, notice{alloc: true, restored: a.inTimelines(e), time: e.Time, born: e.Time,
		size: e.Size, device: e.Device, layer: layer, mem: mem, live: live.Bytes, deviceLive: pd.live})
	if a.opts.Watch != nil {
		a.watch(&a.liveChange, e.PID, e.Addr, e.Stack, e.API)
	}
	return true
}

// notice is the caller's part of a liveChange (the fields mean the same
// there): what changed, for notify to complete from the allocation's group
// and process.
type notice struct {
	alloc, replaced, restored bool
	time, born, size          uint64
	device                    int32
	layer                     event.Layer
	mem                       MemorySpace
	live, deviceLive          uint64
}

// notify fills a.change from n, g (the allocation's group) and sp (its
// process's account) and feeds it to the liveObservers. The fields are
// stored one by one: a composite literal is built on the stack and
// copied, and the copy's wide loads of what narrow stores just wrote
// stalled on every event.
func (a *Analyzer) notify(g *groupState, sp *account, n notice) {
	sp.last = max(sp.last, n.time)
	c := &a.liveChange
	c.alloc, c.replaced, c.restored = n.alloc, n.replaced, n.restored
	c.seq, c.time, c.born = a.run.Events, n.time, n.born
	c.size, c.device = n.size, n.device
	c.layer, c.mem, c.sc = n.layer, n.mem, g.key.sc
	c.group, c.groupLive = g.ix, g.live.Bytes
	c.account, c.allocated = sp.ix, sp.totals.AllocatedBytes
	c.live, c.deviceLive = n.live, n.deviceLive
	a.spikes.changed(c)
	a.timelines.changed(c)
	a.iters.changed(c)
	for _, o := range a.live {
		o.changed(c)
	}
}

// touch marks a class changed since its account's last peak.
func (a *Analyzer) touch(sp *account, ci int32, c *classState) {
	if !c.dirty {
		c.dirty = true
		sp.dirty = append(sp.dirty, ci)
	}
}

// free applies a free call in one memory space.
func (a *Analyzer) free(e *event.Event, layer event.Layer, mem MemorySpace) {
	ch := a.ledger.Free(liveKey(e.PID, layer, mem), e)
	a.freed(e, layer, mem, &ch)
}

// freed applies to the aggregates what the ledger made of a free call.
func (a *Analyzer) freed(e *event.Event, layer event.Layer, mem MemorySpace, ch *ledger.Change) {
	sc := scopeOf(layer, mem)
	ls := a.layer(sc)
	sp := a.account(e.PID, sc)
	switch ch.Verdict {
	case ledger.Failed:
		both(ls, sp, func(t *Totals) { t.FailedFrees++ })
	case ledger.NoAddr:
		both(ls, sp, func(t *Totals) { t.NullFrees++ })
	case ledger.Unknown:
		both(ls, sp, func(t *Totals) { t.UnknownFrees++ })
	case ledger.Freed:
		a.droppedIn(ls, sp, ch.Old, e.Addr, e.Time, ch.Inst.Bytes)
	}
}

// dropped counts as a free at time t a live allocation of pid in scope sc
// that the ledger let go; inst is the process's level just after.
func (a *Analyzer) dropped(pid uint32, sc scope, old ledger.Entry, addr, t uint64, inst ledger.Level) {
	a.droppedIn(a.layer(sc), a.account(pid, sc), old, addr, t, inst.Bytes)
}

// droppedIn is dropped given the scope's totals and the process's account
// (freed has them: not looked up twice per free); live is the process's
// live bytes just after.
func (a *Analyzer) droppedIn(ls *layerState, sp *account, old ledger.Entry, addr, t, live uint64) {
	size := old.Size
	both(ls, sp, func(t *Totals) { t.Frees++; t.FreedBytes += size })
	a.release(old, addr, t, ls, sp, false, live)
}

// release takes a live allocation out of every aggregate at time t;
// replaced says another allocation took its address (its free was
// missed), and live is the bytes the process had live just after.
func (a *Analyzer) release(old ledger.Entry, addr, t uint64, ls *layerState, sp *account, replaced bool, live uint64) {
	c := a.classes[old.Tag]
	size := c.key.size
	c.live.Sub(size)
	a.touch(sp, old.Tag, c)
	g := a.groups[c.group]
	g.live.Sub(size)
	g.hist.set(a.leak, t, g.live.Bytes)
	ds := a.device(c.key.device, sp.key.sc)
	ds.sub(size)
	if sp.key.sc == deviceScope {
		ds.devTouch(old.Tag, c)
	}
	pd := sp.device(c.key.device)
	pd.live -= size
	a.notify(g, sp, notice{replaced: replaced, time: t, born: old.Time,
		size: size, device: c.key.device, layer: c.key.layer, mem: c.key.mem, live: live, deviceLive: pd.live})
	if a.opts.Watch != nil {
		a.watch(&a.liveChange, c.key.pid, addr, c.key.stack, c.key.api)
	}
}

// failure copies a failed allocation with what was live at that moment. It
// runs once per process and scope, so walking the process's groups is
// affordable.
func (a *Analyzer) failure(e *event.Event, layer event.Layer, sp *account) *Failure {
	f := &Failure{
		Allocation: Allocation{Time: e.Time, Addr: e.Addr, Size: e.Size,
			Device: e.Device, API: e.API, Layer: layer, Stack: e.Stack},
		Ret:       e.Ret,
		LiveBytes: a.ledger.InstanceLevel(e.PID, ledgerScope(sp.key.sc)).Bytes,
		PeakBytes: sp.peak,
	}
	if pd := sp.devices[e.Device]; pd != nil {
		f.DeviceLiveBytes = pd.live
	}
	byStack := make(map[event.StackID]*Usage)
	for _, g := range a.groups {
		if g.key.pid == e.PID && g.key.sc == sp.key.sc && g.live.Count > 0 {
			u := byStack[g.key.stack]
			if u == nil {
				u = &Usage{}
				byStack[g.key.stack] = u
			}
			u.Count += g.live.Count
			u.Bytes += g.live.Bytes
		}
	}
	f.LiveStacks = topStacks(byStack, a.opts.TopStacks)
	return f
}
