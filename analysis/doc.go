// Package analysis folds a vramprof event stream into a Result: the
// address-space model of every traced process, its peak and what made it up,
// what was still live at the end, timelines, and findings with remediation.
//
// It imports no BPF, NVML or report package (see the list at the end), so
// it runs (and is tested) without root, a kernel or a GPU. It formats no byte count,
// duration or rate for people and writes no sentence (it only names
// things: sites, frames, devices, PIDs, error codes): a finding is facts
// (the figures, stacks and times its rule used, and which advice
// applies), and report words it with report/units, the one formatter of
// bytes, durations and rates. profile/ and report/ render its Result;
// neither changes it.
//
// # Use
//
//	a := analysis.New(analysis.Options{})
//	for rec := range records { // stream order
//		if err := a.Add(rec); err != nil { ... }
//	}
//	res := a.Finish() // also fine for a stream cut short (no *event.End)
//
// # The model
//
// Each process has one address space per layer (segment: the CUDA API; block:
// a framework's caching allocator), a map from address to live allocation
// {size, stack, time, device, API}. The device is an attribute of the
// allocation, not part of the key: with unified virtual addressing a pointer
// belongs to one device, and cudaFree may run with another device current, so
// a free is always charged to the allocation's device. Events with no layer
// count as segment events; an Event of the device layer counts as ignored
// (NVML's figures come as Sample records, see "The device layer").
//
//   - A successful allocation (Ret 0, Size > 0, Addr != 0) becomes live.
//   - A failed allocation (Ret != 0) is counted with its stack and requested
//     size and is never live. Size 0 is not an allocation (ZeroSizeAllocations).
//   - A free of address 0 is ignored (NullFrees); a free of an address not
//     live (allocated before attach) is counted in UnknownFrees, not an error;
//     a free with Ret != 0 frees nothing (FailedFrees).
//   - An allocation at an address already live means a free was missed (lost
//     events): the old allocation is released and replaced, and the anomaly
//     counted (ReplacedAllocations).
//
// # One ledger, models beside it
//
// What is live, in which process instance, and the levels and peaks that
// makes are kept in one place, package analysis/ledger, which also holds
// these rules (missed frees, physical memory across cuMemRelease and
// cuMemUnmap, PID reuse). The snapshot exporter (profile/snapshot) and the
// live status line of `vramprof run` and `attach` read the same ledger, so
// the three cannot drift apart; what each process instance has live (its
// level per scope) is the ledger's too. The Analyzer drives the ledger call
// by call and keeps its aggregates (classes, stacks, accounts, devices, the
// peaks a flight checkpoint may restore) beside it. The other models are
// observers with their own state (observer.go): the pools' geometry and
// the churn are fed what the ledger made of each device allocation and
// free; the spikes, the timelines and the iteration logs are fed every
// allocation made live or let go, once the aggregates counted it. The API
// books and the VMM figures are models with their own state too. The
// findings rules keep no state: they live in package analysis/rules, one
// file each, and read all of them at Finish through a narrow View the
// Analyzer builds then (view.go); their findings are package
// analysis/finding's types, which this package re-exports (aliases.go).
//
// # Counting each allocation once
//
// The segment layer holds three memory spaces (MemorySpace), each keyed apart
// so that a host pointer or a physical handle never collides with a device
// address:
//
//   - device: Alloc/Free (cudaMalloc*, cuMemAlloc*...), by address;
//   - physical: Create/Release (cuMemCreate), by handle. Physical memory is
//     device usage from creation until the driver frees it: when it has been
//     released and every range mapped to it unmapped (a handle released while
//     mapped is freed at the last unmap);
//   - host: HostAlloc/HostFree (cudaMallocHost, cuMemHostAlloc...), pinned
//     host memory.
//
// Device and physical memory together are the device usage: Totals, Devices,
// each process's Totals, peak, stacks, timelines and findings. Host memory
// has its own Totals (Result.Host, Process.Host), peak and timelines
// (Timeline.Space), and is never added to device figures.
//
// A runtime call (cudaMalloc) calls the driver (cuMemAlloc_v2) underneath;
// the inner call arrives flagged event.FlagNested and is NOT counted in
// Totals, Host, VMM, classes or timelines: the outer call already counts the
// memory. When the runtime is linked in statically with hidden symbols only
// driver calls arrive, un-nested, and they are the totals.
//
// A runtime linked in statically keeps its frames in the user's own file:
// they are told apart by name (IsRuntimeFunction), so that a stack's Site is
// still the user's caller.
//
// # Books
//
// Books are per-API ledgers of device memory, per process and overall: the
// runtime's (libcudart) and the driver's (libcuda, event.API.Driver), each
// counting every Alloc/Free/Create/Release of its APIs, nested or not, keyed
// by the address (or handle) it saw. A cudaMalloc with its nested
// cuMemAlloc_v2 is one runtime allocation, one driver allocation and one
// allocation in Totals. Books overlap by design and are never summed; a call
// of an unknown API is in neither. A book follows calls, not memory: a handle
// released while still mapped leaves the driver book at cuMemRelease.
//
// # Virtual memory
//
// Result.VMM and Process.VMM (nil without any VMM call) count reserves,
// unreserves, creates, releases, maps and unmaps, and keep per device the
// reserved address space (address space only, never usage), the physical
// memory (also in Totals) and the mapped ranges, each at its peak and at the
// end. A reservation is on its caller's current device; physical memory on
// the device cuMemCreate named; a mapping on its handle's device (the
// caller's when the handle was created before attach). cuMemUnmap unmaps
// every mapping contiguous from its address within its size.
//
// Set-device events are informational (Run.DeviceSwitches). Every device
// index a segment-layer event carried is listed in Devices, "unknown" (-1)
// included, with zeros when nothing was allocated there; but for a failed
// set-device call's (the device may not exist), for pinned
// host memory and reserved address space, which are on no device, and for
// cuMemMap, cuMemUnmap and cuMemRelease, which are on their handle's (the
// event's Kind.DeviceRule says which).
//
// # Peak
//
// A process's peak is the most bytes it had live at once across its devices;
// when that value is reached several times the first counts. The allocation
// that crossed it is kept, and the live set at the peak is kept per
// allocation class (pid, stack, device, API, layer, space, size), from which the
// "by stack" views and pprof's peak_* samples come. Tracking costs O(events)
// however often the peak moves: classes changed since the last peak are
// listed, and only they are copied into the snapshot when a new peak is
// reached. Devices (all processes) and each process's devices have their own
// peaks; Totals.PeakBytes is the peak of all processes together.
//
// # Timelines
//
// Live bytes per process, layer and device, on a time grid of at most
// TimelinePoints/2 equal buckets from the run's start whose width doubles as
// the run grows. Each bucket keeps its minimum and its maximum with their
// times, so a timeline has at most TimelinePoints points and never loses the
// peak.
//
// # The leak rule
//
// Per site of each process: the stacks of one source path (every frame the
// same function, file and line, or, without line information, the same
// address; a stack without frames is a site of its own). A call from a
// loop the compiler unrolled has one stack per return address and is one
// site to a person: its stacks' live bytes add up, and the finding names
// the heaviest of them with the site's bytes and allocations. When the
// process's blocks were traced (the
// block layer: USDT pytorch:malloc/free or an allocator spec), tensors
// decide: the rule reads its block-layer stacks, and its segment-layer
// stacks but those whose segments a block was ever placed in (the
// caching allocator's own, charged to whichever caller made the
// allocator grow: a leak of blocks hidden in cached segments is found at
// the blocks' site with the blocks' bytes, and the segments are the
// cache, see "The cache"). Without a block layer it reads the segment
// layer's stacks (device memory). Leak.Layer says which. The run, from Run.Start to
// Run.End, is cut into a grid of at most 64 equal buckets (the width is the
// smallest power-of-two multiple of 1024 ns that fits the run; with n buckets
// used, n is 33..64 once the run is longer than 64 µs). W = min(LeakWindows,
// n) windows (default 6) are cut from it: window k (1..W) ends with bucket
// ceil(k*n/W)-1, so windows are equal to within one bucket and the last one
// ends at Run.End. The stack's live bytes v1..vW at the window ends are read,
// exact at those instants. The stack leaks when
//
//   - v never falls (v[k] >= v[k-1] for every k),
//   - it rises in at least half of the W-1 steps (2*rises >= W-1), and
//   - vW > v1 (so the stack is still live at the end).
//
// Time windows judge when the process ran as much as what it did: a loop
// that a loaded machine descheduled for a window or two, or one that began
// after a long wait (an attach), leaves windows without an iteration, flat,
// however steadily the stack grows. So a stack they do not flag gets a
// second look when its process has a loop (see "Iterations") of at least W
// iterations and the site's change logs are complete, read at the
// iteration starts: y[j] the site's live bytes just before iteration j
// starts, y[count] at the end. The growth's run is the tail of y that
// never falls, from the iteration before its first rise (s; m iterations
// to the end): a leak that began late, at "epoch 60" of 80, is judged from
// there, not diluted by the flat epochs before it. The same rule holds on
// its live bytes at the ends of W windows equal in iterations: window k <
// W ends where iteration s + ceil(k*m/W) starts (the sample the rate per
// iteration takes there), window W at Run.End; the run needs m >= W, and
// the site must hold more at the end than before the loop's middle
// iteration. A site flagged so has these windows as its evidence (their
// ends in Leak.WindowEnds, not equally spaced in time). A step up once
// (state made at a late step) rises in the first of those windows only,
// never in half of them.
//
// Either way the growth must persist through the steady part of the run:
// the stack's live bytes at the end must exceed those at the middle of its
// process's span, read on the grid (the end of the bucket holding the
// middle). The span runs from the process's first traced moment to the
// end of the run for the run's own process (Run.End: its exit in run
// mode, the end of the recording in attach mode; it ran on all that
// time), else to the last time memory became live or went in the stack's
// scope (a child's exit is not recorded, and its last change stands in).
// So a process over a caching allocator traced without its block layer,
// whose segments stop coming after a warm-up, is judged by the time it ran
// on; a child process in the same state still shows a leak: only its
// blocks can tell. A cache warming up, sizes
// growing until a step and repeating after, optimizer state made lazily:
// growth that stopped in the first half is not a leak, whatever loop the
// warm-up's allocations made (a loop found in the warm-up rises at every
// window of its own iterations).
//
// The finding's bytes are the stack's growth over the run: its live bytes
// at the end minus its live bytes at the start of tracing, which are 0
// (tracing knows no stack of memory allocated before it began), so what the
// stack allocated during the run and still held (Leak.GrowthBytes, from the
// process's first traced moment to Run.End). A leak from the first
// iteration counts whole: 60 leaked buffers of 1 MiB are 62914560 bytes,
// even though the first window already held some. The windows are the
// rule's evidence (Leak.WindowStart, WindowEnd, WindowGrowthBytes = vW -
// v1); the windows' rate is vW - v1 over the time from the end of window 1
// to Run.End, in bytes per second (Leak.BytesPerSecond). A steady
// loop (alloc and free each iteration) never qualifies: its live bytes fall
// back between windows, or stay flat. A loop stopped mid-iteration rises in
// one step only, a cache filled once likewise; neither is flagged. Severity
// is high when the growth over the run is at least 10% of the process's
// peak in the stack's layer (the tensors' peak for a block-layer stack),
// else medium. Runs shorter than three buckets have no leak findings.
//
// Leak.Since is when the growth began: with a loop and the stack's change
// log complete, the start of the first iteration from which the stack's
// live bytes at the iteration starts never fell again (scanning back from
// the end while they do not rise); 0 otherwise. The texts say what grew
// (tensors or device memory), where, by how much since then, and how fast.
//
// When the process has a loop (see "Iterations"), a leak also gets its rate
// per iteration: the least-squares slope of the stack's live bytes sampled
// at the iteration boundaries (just before each iteration's first
// allocation at the loop's site, and at the last start plus the period,
// at most the last event), so n iterations give n+1 samples; bytes per
// minute is that over the period. A stack whose live-bytes log cannot
// answer those samples exactly (see "Iterations": more than 65536
// changes, and one of them mid-burst of its own changes) falls back to
// the windows' growth over the iterations that started within them. With the device's capacity known (Options.Capacity,
// else NVML's DeviceInfo) on the device where the stack holds the most,
// the projected time to out-of-memory is the device's headroom at the end
// / (bytes per second). The headroom is NVML's free bytes at its last
// sample (at or before the root process's exit when it exited: later
// samples have its memory back), which counts every process on the device,
// CUDA contexts and the driver's own memory; without an NVML sample, or
// with Options.Capacity, it is capacity - live bytes on that device at the
// end, all traced processes (Leak.HeadroomBytes, HeadroomNVML). Texts quote
// it only within the projection rule (see "Rates and projections").
//
// # Rates and projections
//
// A rate is evidence for about as long as it was watched, no further. The
// observed span of a growth's rate is the iterations (count x period) when
// the process has a loop, else the windows (end of window 1 to Run.End);
// Leak.BytesPerSecondObserved returns both. The texts report writes
// (finding summaries, the terminal summary, report.md, report.html,
// check's evidence) follow one rule:
//
//   - time base: a rate is quoted per hour, per minute or per second, the
//     longest base not longer than the observed span (RateBaseFor); under
//     a second of observation there is no rate per unit of time: per
//     iteration with a loop, else the growth over its span ("+60.00 MiB
//     over 38.5 ms").
//   - horizon: a projection reaches at most ProjectionFactor (10) times the
//     observed span. The time to out-of-memory is quoted only when it is
//     within it (Leak.TimeToOOMProjectable); otherwise the text says "run
//     too short to project" and states what grew, by how much, over how
//     long.
//
// Durations and times are printed in the unit that fits (ns, µs, ms, s,
// min, h; report/units). report.json keeps the exact figures whatever the
// rule (bytes_per_second, bytes_per_minute, time_to_oom_s) and adds the
// observed span, the time base and the horizon next to them.
//
// # The cache
//
// A caching allocator keeps the segments it got and reuses them: its
// reserve grows while new sizes appear and then stays flat, whatever the
// tensors do. For every process with a block layer in which a block was
// placed in a traced segment, when its segment peak (the reserve) exceeds
// its block peak (the most its tensors held at once), one cache_growth
// finding (info) says so: the reserve's peak and when it was first
// reached (it never grew past it after), the tensors' peak and when,
// both at the end (CacheEvidence), the allocator's segment stacks by
// bytes allocated; its bytes are the reserve's peak above the tensors'.
// It is never a leak: the leak rule leaves those stacks to the blocks.
//
// # Pinned host growth
//
// The leak rule, applied to each stack's live pinned host bytes (host
// space: cudaMallocHost, cudaHostAlloc, cuMemHostAlloc), per process: the
// stacks it flags are the growing ones, and the process gets one
// pinned_host_growth finding naming them (at most TopStacks). A stack's
// growth is over the run, as a leak's: its live pinned bytes at the end
// minus at the start of tracing (0), what it pinned during the run and
// kept. With a loop (see "Iterations", detected from device allocations)
// and every growing stack's change log complete, the rate per iteration is
// the least-squares slope of the growing stacks' summed live bytes at the
// iteration boundaries, as a leak's; otherwise, when a loop exists, the
// windows' growth over the iterations that started within them. The
// finding's bytes sum the stacks' growth; Finding.Leak carries the summed
// window values, and rates follow "Rates and projections". Severity is high from 1 GiB of growth, else medium. Host
// bytes are never added to device figures, nor flagged as device leaks.
//
// # Device imbalance
//
// Each device keeps the live set at its own peak (all processes, device
// memory), by the same dirty-class trick as a process's peak
// (Device.PeakStacks); an instance whose PID was taken over leaves it with
// its memory. When the processes that held device memory form one process
// tree (a process and the workers or ranks it started; unrelated processes
// of attach --all are never compared) and at least two known devices held
// memory, the heaviest and the lightest device peaks are compared: a
// device_imbalance finding when the difference is at least 256 MiB and at
// least a quarter of the lightest peak. Its bytes are that difference; its
// stacks, those whose bytes at the heavy device's peak exceed the same
// code path's at the light device's peak, by that excess. The same code on
// two ranks has one stack ID per process, so stacks match by their
// symbolized frames, rendered (raw frames left out: ASLR moves them
// between exec'd processes); a stack with no symbolized frame (a forked
// child gone before its mappings were read) takes the symbols of a stack
// with the very same return addresses (its parent's image), else matches
// by its raw addresses. The
// finding belongs to the process that peaked highest on the heavy device.
//
// # Iterations
//
// Per process instance, from its successful non-nested device allocations
// by allocation site (a source path, as the leak rule's sites: the stacks
// of one call unrolled by the compiler allocate as one site, in stream
// order; the site's stack with the most allocations names it): its blocks (tensors) when its block layer
// was traced, else its segments (a caching allocator makes segments in a
// warm-up and at new sizes, not once per step). A site's allocations
// are grouped into bursts: a burst starts at its first allocation and after
// every long gap (so forward()'s four allocations in one iteration are one
// burst); with no long gap every allocation is a burst. Two limits of a
// long gap are tried: 4 times the lower quartile of the site's gaps, and
// the natural break of the sorted gaps, the largest jump between
// consecutive ones by a factor of at least 4 that leaves at least 3 gaps
// above it (in-step gaps vary, a cached block being quicker than a new
// segment, and the quartile then splits steps; a few stalls make a break
// of their own, where the quartile is right). The site's loop is the one
// of the two, as below, that is not patterned, else with more iterations. The most common burst size k (the
// smaller on a tie) is the site's allocations per iteration: a thread
// stalled inside an iteration splits a burst now and then, and only the
// mode is robust to it. The site's allocations are then cut into
// consecutive runs of k from its first: each run is an iteration, started
// by its first allocation (so n allocations make ceil(n/k) iterations, a
// loop stopped mid-iteration counting its last); at least 3 in 4 of the
// runs must start where a burst does (a few stalls can cut a site in long
// bursts each seen once, the smallest of them a part of a step: runs of it
// start mid-step, and make more iterations than there are). A site is periodic when it
// has at least 4 iterations and the median absolute deviation of the
// spacings between iteration starts is at most a quarter of their median
// (which must be > 0); it is patterned when more than one spacing in 8 is
// longer than 4 times the median and those recur at one stride (the most
// common distance between consecutive long ones is at least 3 in 4 of
// them; fewer than 3 cannot tell, and are taken for a stride): a site
// with several allocations per step, taken one per iteration, has a long
// spacing at every step, every k spacings; a loaded machine's stalls come
// as often at random, and leave a real loop unpatterned. A patterned loop is taken
// only when no other is, at the site (of its two limits) and in the
// process. A loop whose starts span less than a quarter of the process's
// allocations in the layer (first to last, all sites: a model's few
// weights made in a row at load time are as regular as a loop) is short,
// and taken only when no other is, before patterned ones are weighed.
// The loop is the periodic site, not short before short, not patterned
// before patterned, with the most
// iterations, the earliest first start on a tie, unless its iterations
// nest in another site's: micro-steps of gradient accumulation (forward
// runs 4 times a step, the gradients are made once a step and freed by
// zero_grad) are the most iterations, but not the step. They nest when
// the process's live bytes just before the loop's starts repeat every k
// starts and not every one (y[j+k] - y[j] takes one value for at least 3
// in 4 of the js, the smallest such k, at most 64: a warm-up, a step up
// once or a steady leak keep k at 1; a checkpoint every 4 steps, freed
// within its step, too), and another site's loop, not patterned, has
// about count/k iterations (|its count x k - count| < k) of k times the
// period (within 10%): that loop is the step (the one with the most
// iterations of them). A process whose last allocation request failed
// (none succeeded after it), between half a period and two after the
// loop's last start, at the site (as "Sites" renders it) of an allocation
// made in the last iteration (from the start before the last on: the
// loop's site may come after it in a step), had one more iteration, cut by the failure (a
// batch too large for the device at its embedding): Count counts it,
// Starts and the figures do not; a request from code the loop never ran
// (a larger batch tried after it) cuts none. Iterations.Count is the
// loop's iterations, PeriodNs their median spacing, Starts the starts
// (the first 1000), LastStart the last. Each allocation a site logs carries the
// process's live and cumulative allocated bytes in its scope just before
// it (the process keeps only its current figures), so per iteration,
// exactly, whatever the run's length: AllocatedBytesPerIteration, the
// bytes allocated from the first start to the last over the iterations
// between (Count - 1), and LiveGrowthPerIteration, the least-squares
// slope of live bytes just before each start, both in the loop's layer
// (tensors when blocks pace it). A lost event at the site shifts the runs
// after it.
//
// Memory is bounded, whatever the run's length: a stack logs its first
// Options.IterationLog (DefaultIterationLog, 65536) allocations, 24 bytes
// each; then its log is compacted to its burst starts, the allocations
// after a gap longer than the least of its two burst limits (computed on
// those allocations), each with its ordinal and its gap (40 bytes), and
// from then on it logs only allocations after such a gap. Every limit the
// loop tries is at least that one, so every burst it cuts starts at a
// kept allocation, the kept gaps cut them again at a larger limit, and
// the ordinals give the bursts' sizes and the runs: a trainer making
// 1000 tensors a step at one site keeps one entry a step, and its loop,
// counts and figures are those of the complete log. A run that starts
// mid-burst (a stall, a lost event) is not known after compaction: the
// loop skips it (Count still counts it; the rates weigh the others by
// their iteration numbers). A stack whose loop takes each allocation for
// an iteration (one a step) has nothing to compact, and a compacted log
// that fills again (65536 steps) stops: the site's loop is then read from
// the allocations its log covers. So a stack holds at most 65536 entries,
// 2.5 MiB at most at the default, and a site whose log was compacted is
// read from its busiest stack alone (two compacted logs' ordinals do not
// merge; the stacks of an unrolled call take turns in every burst, so
// one of them makes as many).
//
// A stack's live-bytes log (the leak rule's and pinned host growth's
// rates per iteration, the second look, Leak.Since) is bounded the same
// way: its first 65536 changes (16 bytes each), then the last change of
// each burst of its changes (a gap longer than the least of its burst
// limits ends one) with the next burst's first change (32 bytes each),
// at most 65536 of them, after which it is dropped as before. Read just
// before an event, or at a time, that falls in a gap between its bursts,
// it is exact; within one of its bursts it does not know, and the rules
// read it only when every sample they take (the loop's starts, the last
// start plus the period) falls in a gap: a leak inside a site that makes
// and frees hundreds of tensors a step, read at the steps' starts, keeps
// its exact rate and start. Without its block layer, a process over a
// caching allocator makes few segment calls in steady state, so it usually
// has no loop, or one in its warm-up only.
//
// # Processes and PID reuse
//
// A process is an instance, not a PID. The probes write a Process record
// when they start tracing a process, and again when it execs a new image; a
// record for a PID whose current instance already had events is an exec or
// a reused PID (the first process exited, a fork got the PID again), which
// the record cannot tell apart, and either way what ran before lost its
// memory (the driver frees it at exec and at exit): it starts a new
// instance, and later events of the PID go to it. A record for an instance
// without events yet (a fork child that execs before any CUDA call) or
// implied by events alone (hand-made or imported streams) describes that
// instance instead. The old instance keeps its figures: what it had live at
// its end is what it leaked, and stays in its Totals, classes (pprof's
// inuse_*) and findings; but it leaves the all-process figures (Totals,
// Devices, the books and the VMM of all processes) when the new instance
// starts (Process.SupersededAt). Result.Processes then holds two entries
// with one PID and different Starts; classes, timelines and findings carry
// ProcessStart to tell them apart.
//
// # Imported streams
//
// A stream from an importer (Mode "import": a PyTorch snapshot) knows no
// process: its events carry PID 0, and it has no parent, exit code, host
// or wall-clock start (Run.Imported). Its times are clock times when the
// snapshot's trace entries carry time_us; otherwise they are an order only
// (End reason EndReasonUntimed), or all at the start when it has no trace
// (Run.TimesKnown). Texts say "unknown" for each of these, never 0
// (Run.PIDText; finding summaries say "an unknown time").
//
// # The device layer
//
// NVML's records are the device layer: NVMLStatus (Result.NVML: available,
// or the reason it is not; nil when the stream has none, NVML off),
// DeviceInfo (a device's name, UUID and capacity) and Samples (a device's
// used, free and total bytes, and used bytes per process, every tick).
// NVML's device index is taken for CUDA's: the trace knows no CUDA UUID,
// so where CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER renumber devices the
// figures belong to another GPU (Device.NVML says so).
//
// Per device: the latest sample at or before the device's traced peak, the
// sample with the most used bytes, and the last one. Per process instance,
// per tick (the samples of every device stamped with one time): NVML's used
// bytes summed over the devices that list the process with a size (0 is
// NVML's "cannot tell"; a tick sizing it on no device does not count), next
// to the instance's traced live device bytes when the tick's records reached
// the analysis. The gap, NVML - traced, is the CUDA context, library
// workspaces and memory allocated before attach; it is reported, never
// hidden, and can be negative (NVML lags; allocations traced just before a
// tick may not be in it yet). Process.NVML has it at the latest tick and at
// the latest tick at or before the process's traced peak. A device whose
// DeviceInfo carries a ProcessesNote (NVML lists no processes on it: MIG
// partitions, vGPU guests) gives no per-process figure; the note becomes
// one line of NVML.Notes, and the device's own figures are kept. A process
// no tick sized says why in one line (Process.NVMLAbsent): listed without a
// size, no sample while it was traced, no process lists on the devices
// sampled, or never listed in the samples taken while it was traced.
//
// Pre-existing memory (Process.Preexisting): a process traced from its
// first instruction (run mode, the launched command or a child forked by a
// traced process, known by its PPID) has none, exactly 0. Any other (attach
// mode) held an unknown amount when tracing began; with NVML it is
// estimated as the gap at the first tick that listed it, clamped at 0, an
// upper bound since the context is in it. Its frees are UnknownFrees, their
// sizes unknown.
//
// # Fragmentation
//
// Blocks (the block layer) lie inside segments (device allocations at the
// segment layer) by address. Per process and device a pool keeps the live
// segments sorted by address and, in each, its live blocks sorted by
// address: placing or removing a block is a binary search (O(log n) plus
// the slice shift). Reserved = live segment bytes, allocated = live block
// bytes inside them (requested sizes), cached free = the difference. Free
// ranges (holes between blocks and at segment ends), the largest one and
// pinned segments (one live block under a quarter of the segment) are
// computed from the geometry, O(live blocks), only when needed: at a
// failure, at the end, and at the worst moment (the most cached free while
// blocks are allocated), whose snapshot is completed lazily before the
// next change, so only local maxima pay for it.
//
// Expandable segments (PyTorch's expandable_segments:True): the allocator
// reserves a range (cuMemAddressReserve) and maps pages into it
// (cuMemCreate + cuMemMap) as it grows. A mapped range is a segment of the
// geometry, merged with the mapped segments it touches inside one
// reservation (a block may span pages; two reservations that touch stay
// apart), cut where a page is unmapped (the blocks on either side go with
// their part). Reserved is then mapped memory, as PyTorch's reserved_bytes;
// a mapped segment is never "pinned" (the allocator unmaps the free pages
// around a block). Pages mapped before the pool's first block event are
// taken from the ledger's mappings. Pool.Expandable marks such a pool.
// The device memory of a page is charged to the stack that created it
// (cuMemCreate), not to the mapping's: a mapped segment that holds a block
// makes the creators of its pages hosts too (see "The leak rule"), so the
// pages of an expandable segment are the cache, never a leak.
//
// OOM forensics: a failed non-nested segment allocation while the block
// layer is traced records the geometry before the allocator reacts; under
// expandable segments, a failed cuMemCreate, whose request is the physical
// memory the thread created since its last mapping plus the failing size
// (the pages the allocator asked for that request; PyTorch creates every
// page before it maps any). Kind:
// "fragmentation" when cached free >= the failing cudaMalloc's size (the
// segment asked for: PyTorch's USDT fires only for blocks handed out), or
// the pages asked, else "capacity". Segment frees
// that follow are the cache flush; a successful allocation of the same
// size on the same thread is a retry that worked (retry_succeeded); a
// failed one, or a block event or the end first, makes it final. Under
// expandable segments the flush is the pages unmapped, the retry worked
// when the thread maps a page again, and any failed cuMemCreate of the
// thread makes it final. The allocator's own report of the request it gave
// up on (event.KindOOMReport: PyTorch's c10::reportOutOfMemoryToProfiler,
// called before it raises) ends the thread's latest failure and gives it
// OOM.Reported: the tensor's request, the allocator's allocated and
// reserved bytes. Under expandable segments that request is the OOM's
// (the pages asked stop at the first refused: a lower bound, PagesBytes);
// a cudaMalloc's size stays the request otherwise (what PyTorch's message
// names).
//
// The fragmentation finding is judged at every final fragmentation OOM and
// quotes the worst: the most cached free bytes that could not serve the
// request (ties: the larger share of reserved memory, then the earlier);
// PoolEvidence.Failures counts them. Without a failing request, the worst
// moment (a quarter of reserved memory cached free, tensors holding a
// quarter, no free range half of the free bytes) is reported as info only:
// nothing failed and nothing measurable was lost. Under expandable
// segments no advice proposes them: a fragmentation OOM there is advised
// AdviceInterleaved (free ranges between live blocks), a capacity OOM
// AdviceReduceBatch worded with the pages the flush already unmapped, and
// garbage_collection_threshold is not advised.
//
// Garbage collection: PyTorch's garbage_collection_threshold:T (honoured
// only with torch.cuda.set_per_process_memory_fraction set) makes the
// allocator, when no cached block fits a request, release whole free
// large-pool segments (unsplit free blocks; not the 2 MiB small-pool ones)
// until reserved memory is at most T x the allowed memory, before it calls
// cudaMalloc. It is advised only on this evidence: a failed cudaMalloc of
// kind "fragmentation" (the cache held the request) that the free-all and
// retry survived, the cache at least a quarter of reserved, and the whole
// free large segments at the failure enough to make room: reserved - those
// + request <= capacity. Capacity is Options.Capacity, else NVML's, else
// the least the retry proved available (reserved - released + request,
// when the free-all released no more than those segments). T =
// floor(100 * (capacity - request) / capacity) / 100, leaving room for the
// request, and it must exceed allocated / capacity (else reclamation could
// never get under it). Not when the pool also had a final fragmentation
// OOM: reclaiming did not save that run. The advice goes in the pool's
// fragmentation finding, which such a failure creates (medium, bytes =
// cached free at the failing request) when no other condition did.
//
// # Churn
//
// Per process: non-nested device allocation and free calls at the segment
// layer, their time inside (Event.Duration), and release-and-reallocate
// cycles: a segment freed and a segment of the same size allocated again
// on the same device within Options.ChurnWindow (default 2 s), the oldest
// pending release matched first; a cycle whose segment was freed after
// the previous cycle's allocation begins a round (Churn.Releases: the
// cache emptied, then refilled). A cycle's cost is the free's and the
// allocation's durations, reported in ms per second of run. With the
// block layer traced, each tensor free is counted, and so is each one the
// allocator passed straight to cudaFree (a segment free of the same
// pointer and size, the thread's next call): when nine in ten were, the
// allocator is not caching (PYTORCH_NO_CUDA_MEMORY_CACHING=1), and the
// cycles are the tensors' own, not a cache released by empty_cache()
// (Churn.CachingOff). A segment release (free, unmap, release) made on a
// thread inside an allocator's release scope (event.KindScopeBegin and
// KindScopeEnd: PyTorch's emptyCache, paired by rsp) takes the scope's
// entry stack as the events come in (scopes.go), so a cycle's release
// stack names the code that emptied the cache even when the walk from
// cudaFree stopped inside the allocator.
//
// # Findings
//
// peak (one per process: bytes = the peak, stacks = the largest stacks at
// the peak), leak (one per leaking stack, at most 10 per process: bytes =
// the stack's growth over the run; severity high when it is at least 10%
// of the process's peak in the stack's layer), cache_growth (info, one
// per process with a block layer whose reserve outgrew its tensors, see
// "The cache"), oom (one
// per process whose allocations ran out of memory, return code 2 from
// either library: bytes = the first such request, with what was live at
// that moment), failed_call (one per process and error other than
// out-of-memory, named by the library that returned it: cudaError_t from
// the runtime, CUresult from the driver; bytes = the requests' sum;
// critical for setup errors such as no driver, no device or not
// initialized, with what to check, else high). With the block layer
// traced, oom becomes one finding per segment allocation that ran out of
// memory (at most 5 per pool):
// critical when final, with remediation by kind (fragmentation:
// expandable_segments:True, then max_split_size_mb:N with N one MiB above
// the largest segment holding live blocks smaller than the request, given
// only when N MiB <= the request; capacity: reduce the batch or
// activations, naming the largest live blocks, and say that allocator
// settings would not help), medium when a retry succeeded (the cache was
// flushed, with its cost). fragmentation (bytes = cached free at a final
// fragmentation OOM, high; or at the worst moment when cached free is at
// least 16 MiB and a quarter of reserved, tensors hold a quarter, and no
// free range reaches half of it, medium; or, with the evidence for
// garbage_collection_threshold, at a failure the flush-and-retry survived,
// medium; see "Fragmentation"). churn (bytes = the cycles' bytes; at least
// 3 cycles in a process whose block layer was traced; medium when the
// cache was released and refilled in at least every other iteration of
// the process's loop (Churn.Releases against Iterations.Count) or the
// cycles cost 10 ms per second, else info (a release after each evaluation
// is a choice, priced at info), and info when the allocator was not
// caching (the cause is that setting); the release stacks come first when the
// frees carry stacks: imported snapshots do, the live probes take none at
// a free). pinned_host_growth (bytes = the growing stacks' growth over
// the run; see "Pinned host growth"). device_imbalance (bytes = heaviest
// minus lightest device peak, medium; see "Device imbalance"). Findings are ranked by
// bytes, then severity (RankFindings). Every summary and remediation line
// report writes quotes this run's numbers from the finding's evidence, and
// points at the stack's site (Stack.Site, see "Sites").
//
// # Sites
//
// A stack's site (Stack.Site) is the one name every output shows for it:
// the summary, findings and remediation, the leak table, report.html,
// check's evidence, baselines and diffs. It should name the place to fix,
// so it is chosen in two steps.
//
// Candidates: named frames outside the CUDA runtime and driver
// (IsRuntimeFile; or by name, cudaMalloc, cuMemAlloc_v2, cudart::..., for
// a runtime linked statically into the program), caching allocators (IsAllocatorFile) and glue
// (IsGlueFile: libffi, CPython's _ctypes, the cffi backend, libpython or a
// python executable's eval loop and call machinery, libc and the loader;
// and Python frames of <frozen importlib...> or the ctypes and cffi
// packages). An unnamed frame (0x7f... (libffi.so.8.1.2)) is never a
// candidate: its address changes from run to run. So a Python program
// calling the runtime through ctypes or cffi gets its innermost Python
// frame, "cache_embeddings (model.py:22)". Python frames of installed
// libraries and the standard library (site-packages, dist-packages,
// lib/python3.N/: torch/nn/functional.py's linear) are candidates only in
// a stack without a frame of the user's own code.
//
// Shared helpers: the leaf-most candidate is the site unless the
// process's other allocation stacks share it. Compare each stack's
// candidates from the leaf outward, by function and file (not line: one
// function allocating at two lines is one caller), with direct recursion
// folded into one frame (so the depth of a recursion never tells stacks
// apart). The first frame at which some allocation stack of the same
// process goes on to a different caller, or ends, is a helper; the frame
// just outside it is the caller that tells this stack apart, and the site
// is the call edge "caller (file:line) -> helper (file:line)":
// "log_metrics (train.c:40) -> dev_alloc (train.c:10)" for the leak, and
// "load_weights (train.c:20) -> dev_alloc (train.c:10)" for the weights,
// where the old rule said "dev_alloc" for both. Consequences, on purpose:
//
//   - a helper called from one place only is not shared: it stays the site
//     (there is no other stack to tell apart);
//   - a leaf all stacks share through one path (one caller function) stays
//     the site, with the line of each allocation;
//   - in a chain of helpers (dev_alloc called only by alloc_tensor, called
//     by several), the helper named is the one the callers part at
//     ("log_metrics -> alloc_tensor"); the first parting is used, not the
//     last, so that a caller further out (another thread's entry, a second
//     loop) does not rename sites that were already apart;
//   - a stack cut short at the helper (a frame-pointer walk that stopped)
//     keeps the helper;
//   - a stack with no candidate names its leaf-most frame outside the
//     runtime and allocators, even unnamed, else its leaf: something
//     rather than nothing.
//
// Stacks are compared within one process (by PID): another program's
// helper does not make this one's shared. Stack.SiteFrame and Stack.Helper
// are the frames named; the profile package starts its pprof stacks at
// SiteFrame.
//
// # Concurrency
//
// An Analyzer is used by one goroutine. A Result is read-only once Finish
// returns it and may then be shared.
//
// Imports, besides the standard library: analysis/finding, analysis/ledger,
// analysis/rules and probes/event.
package analysis
