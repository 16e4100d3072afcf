package rules

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/analysis/finding"
	"github.com/vramprof/vramprof/probes/event"
)

const (
	// imbalanceMin: a gap between device peaks below 256 MiB is batch
	// shapes, allocator rounding, a rank's logging buffers; an optimizer
	// state, an evaluation pass or a checkpoint gathered on one rank is
	// more than that for any model worth several GPUs.
	imbalanceMin = 256 << 20
	// imbalanceShare: the heaviest peak must also exceed the lightest by
	// at least a quarter (1/imbalanceShare) of the lightest, so that a
	// 40 GiB-per-rank job is not flagged for a few hundred MiB of noise.
	imbalanceShare = 4
)

// imbalanceStack is a stack's share of the difference between the heaviest
// and the lightest device: its bytes at the heavy device's peak minus the
// same frames' bytes at the light device's peak.
type imbalanceStack struct {
	stack      event.StackID
	heavy      finding.Usage
	lightBytes uint64
}

func (s imbalanceStack) diff() uint64 { return s.heavy.Bytes - s.lightBytes }

// Imbalance compares the peaks of the devices in use (see the analysis
// doc, "Device imbalance"): at most one finding, none when they are
// balanced, fewer than two devices held memory, or the processes holding
// device memory are not one process tree.
func Imbalance(v *View) []finding.Finding {
	if f := imbalance(v); f != nil {
		return []finding.Finding{*f}
	}
	return nil
}

func imbalance(v *View) *finding.Finding {
	if !oneTree(v) {
		return nil
	}
	var used []*Device
	for i := range v.Devices {
		if d := &v.Devices[i]; d.Index != event.DeviceUnknown && d.PeakBytes > 0 {
			used = append(used, d)
		}
	}
	if len(used) < 2 {
		return nil
	}
	heavy, light := used[0], used[0]
	for _, d := range used[1:] {
		if d.PeakBytes > heavy.PeakBytes {
			heavy = d
		}
		if d.PeakBytes < light.PeakBytes {
			light = d
		}
	}
	diff := heavy.PeakBytes - light.PeakBytes
	if diff < imbalanceMin || diff*imbalanceShare < light.PeakBytes {
		return nil
	}

	key, rep := stackKeys(v)
	lightBy := make(map[string]uint64)
	for _, s := range light.PeakStacks {
		lightBy[key(s.Stack)] += s.Bytes
	}
	heavyBy := make(map[string]*imbalanceStack)
	var order []string
	for _, s := range heavy.PeakStacks {
		k := key(s.Stack)
		is := heavyBy[k]
		if is == nil {
			is = &imbalanceStack{stack: rep(s.Stack), lightBytes: lightBy[k]}
			heavyBy[k] = is
			order = append(order, k)
		}
		is.heavy.Count += s.Count
		is.heavy.Bytes += s.Bytes
	}
	var diffs []imbalanceStack
	for _, k := range order {
		if is := heavyBy[k]; is.heavy.Bytes > is.lightBytes {
			diffs = append(diffs, *is)
		}
	}
	slices.SortFunc(diffs, func(x, y imbalanceStack) int {
		return cmp.Or(cmp.Compare(y.diff(), x.diff()), cmp.Compare(x.stack, y.stack))
	})

	// The finding belongs to the process that held the most on the heavy
	// device at its own peak there.
	var owner *Process
	var ownerPeak uint64
	procs := map[int32][]uint32{}
	for _, p := range v.Processes {
		for _, d := range p.Devices {
			if d.PeakBytes == 0 {
				continue
			}
			procs[d.Index] = append(procs[d.Index], p.PID)
			if d.Index == heavy.Index && (owner == nil || d.PeakBytes > ownerPeak) {
				owner, ownerPeak = p, d.PeakBytes
			}
		}
	}
	ev := &finding.ImbalanceEvidence{Devices: len(used),
		Heavy: finding.DevicePeak{Index: heavy.Index, PeakBytes: heavy.PeakBytes, CapacityBytes: heavy.CapacityBytes, PIDs: pidSet(procs[heavy.Index])},
		Light: finding.DevicePeak{Index: light.Index, PeakBytes: light.PeakBytes, CapacityBytes: light.CapacityBytes, PIDs: pidSet(procs[light.Index])}}
	f := &finding.Finding{Kind: finding.KindDeviceImbalance, Severity: finding.SeverityMedium, Bytes: diff, Time: heavy.PeakTime, Imbalance: ev}
	if owner != nil {
		f.PID, f.ProcessStart = owner.PID, owner.Start
	}
	for i, s := range diffs {
		if i < v.TopStacks {
			f.Stacks = append(f.Stacks, finding.FindingStack{Stack: s.stack, Frames: v.Lines(s.stack), Site: v.Site(s.stack),
				Count: s.heavy.Count, Bytes: s.diff()})
		}
		if i < 3 {
			ev.Stacks = append(ev.Stacks, finding.ImbalanceStack{Stack: s.stack, HeavyBytes: s.heavy.Bytes, LightBytes: s.lightBytes})
		}
	}
	return f
}

// stackKeys returns a key that is equal for the same code path in two
// processes: the same code on two ranks has one stack ID per process. The
// key is the stack's symbolized frames, rendered; frames without a
// function are left out (their raw addresses differ between exec'd
// processes under ASLR). A stack with no symbolized frame (its process
// exited before its mappings were read) borrows the key of a symbolized
// stack with the very same return addresses: a forked child runs its
// parent's image at the parent's addresses. Otherwise its raw addresses
// are its key.
//
// rep returns the stack to show for id: id itself, or the symbolized stack
// it borrowed its key from.
func stackKeys(v *View) (key func(event.StackID) string, rep func(event.StackID) event.StackID) {
	symbolic := func(st *Stack) string {
		var parts []string
		for i, f := range st.Frames {
			if f.Function != "" && i < len(st.Lines) {
				parts = append(parts, st.Lines[i])
			}
		}
		return strings.Join(parts, "\n")
	}
	raw := func(st *Stack) string {
		var b strings.Builder
		for _, f := range st.Frames {
			fmt.Fprintf(&b, "%x;", f.Addr)
		}
		return b.String()
	}
	byRaw := make(map[string]event.StackID)
	ids := make([]event.StackID, 0, len(v.Stacks))
	for id := range v.Stacks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if st := v.Stacks[id]; len(st.Frames) > 0 {
			if symbolic(st) != "" {
				if _, ok := byRaw[raw(st)]; !ok {
					byRaw[raw(st)] = id
				}
			}
		}
	}
	rep = func(id event.StackID) event.StackID {
		st := v.Stacks[id]
		if st == nil || len(st.Frames) == 0 || symbolic(st) != "" {
			return id
		}
		if sym, ok := byRaw[raw(st)]; ok {
			return sym
		}
		return id
	}
	key = func(id event.StackID) string {
		st := v.Stacks[rep(id)]
		if st == nil || len(st.Frames) == 0 {
			return finding.NoStack
		}
		if k := symbolic(st); k != "" {
			return k
		}
		return raw(st)
	}
	return key, rep
}

// pidSet sorts pids and drops repeats.
func pidSet(pids []uint32) []uint32 {
	slices.Sort(pids)
	return slices.Compact(pids)
}

// oneTree reports whether the processes that held device memory descend
// from one traced process (by PPID): one job, a process and the workers or
// ranks it started. Unrelated processes (attach --all) are not compared.
func oneTree(v *View) bool {
	byPID := make(map[uint32]*Process, len(v.Processes))
	for _, p := range v.Processes {
		byPID[p.PID] = p
	}
	root := func(p *Process) uint32 {
		for range len(v.Processes) {
			q := byPID[p.PPID]
			if q == nil || q == p {
				break
			}
			p = q
		}
		return p.PID
	}
	var first uint32
	seen := false
	for _, p := range v.Processes {
		if p.PeakBytes == 0 {
			continue
		}
		rt := root(p)
		if seen && rt != first {
			return false
		}
		first, seen = rt, true
	}
	return seen
}
