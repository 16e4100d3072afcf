//go:build linux

package probes

import (
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/vramprof/vramprof/probes/usdt"
)

// attacher owns the uprobe links. Each file (by device and inode) is probed
// once: uprobes live on the inode, so one set of links serves every process
// that maps the file, and the BPF targets map filters by process. Not safe
// for concurrent use: the session's reader goroutine is its only user after
// start-up.
type attacher struct {
	objs *bpfObjects
	// need waits for the programs named to be loaded into objs
	// (loader.need), or loads them.
	need  func(names ...string) error
	pid   int // perf-level process filter; 0 for none (every target is in the BPF map)
	links []link.Link
	// tree, when not 0, is the root of the process tree that loader
	// probes placed now serve alone (treeprobe.go): run's command, stopped
	// before its first instruction, so every process of the tree is
	// forked from it later. Probes placed while it is 0 serve every
	// process.
	tree int
	// trees are the loader probes limited to tree, and treeFiles their
	// files (widen makes them serve every process).
	trees     []*treeProbe
	treeFiles []*probedFile
	// noMulti: the kernel has no uprobe_multi links; use one link per probe.
	noMulti bool
	// nextSpec is the next free usdt_specs slot.
	nextSpec uint32
	files    map[fileKey]*probedFile
	// pytest are the libc files probed for pytest's phases (pytest.go),
	// apart from files: discovery knows nothing of them.
	pytest map[fileKey]bool
}

func newAttacher(objs *bpfObjects, need func(names ...string) error, pid int) *attacher {
	return &attacher{objs: objs, need: need, pid: pid, files: make(map[fileKey]*probedFile)}
}

// loadPrograms waits for the programs pf's targets need to be loaded
// (loader.need).
func (a *attacher) loadPrograms(pf *probedFile) error {
	var names []string
	for _, t := range pf.Targets {
		switch t.Spec.Prog {
		case progCall:
			if !a.noMulti {
				names = append(names, "call_enter_multi", "call_return_multi")
			} else {
				names = append(names, "call_enter", "call_return")
			}
		case progUSDT:
			names = append(names, "usdt_block")
		case progSpec:
			names = append(names, "spec_enter", "spec_return")
		}
	}
	slices.Sort(names)
	if err := a.need(slices.Compact(names)...); err != nil {
		return fmt.Errorf("probe %s: %w", pf.Path, err)
	}
	return nil
}

// attached reports whether the file is probed already.
func (a *attacher) attached(k fileKey) bool { return a.files[k] != nil }

// attach places every probe pf names. On error, the probes placed for pf so
// far are removed again: a file is probed completely or not at all, so an
// allocation is never seen without its free.
func (a *attacher) attach(pf *probedFile) (err error) {
	if a.attached(pf.Key) {
		return nil
	}
	if err := a.loadPrograms(pf); err != nil {
		return err
	}
	ex, err := link.OpenExecutable(pf.OpenPath)
	if err != nil {
		return fmt.Errorf("open %s for uprobes: %w", pf.Path, err)
	}
	// The kernel resolves the path again when each probe is created: a
	// process that exits meanwhile takes its /proc/PID/root with it. The
	// same file by our own path (same device and inode) does as well.
	if alt := samePathOutside(pf); alt != "" {
		if ex2, err := link.OpenExecutable(alt); err == nil {
			ex = ex2
		}
	}
	var placed []link.Link
	var trees []*treeProbe
	defer func() {
		if err != nil {
			for i := len(placed) - 1; i >= 0; i-- {
				_ = placed[i].Close()
			}
			for _, tp := range trees {
				_ = tp.Close()
			}
		}
	}()
	var calls []target
	for _, t := range pf.Targets {
		switch t.Spec.Prog {
		case progCall:
			calls = append(calls, t)
		case progLoader:
			if a.tree != 0 && a.pid == 0 {
				path := pf.OpenPath
				if alt := samePathOutside(pf); alt != "" {
					path = alt
				}
				// Without the kernel's means (no tracefs, a path
				// uprobe_events cannot take), the probe below serves
				// every process: more traps, nothing missed.
				if tp, err := openTreeProbe(path, t.Offset, a.tree, a.objs.LoaderState); err == nil {
					trees = append(trees, tp)
					continue
				}
			}
			l, err := a.loaderLink(ex, pf, t)
			if err != nil {
				return err
			}
			placed = append(placed, l)
		case progUSDT:
			l, err := a.attachUSDT(ex, pf, t)
			if err != nil {
				return err
			}
			placed = append(placed, l)
		case progSpec:
			links, err := a.attachSpec(ex, pf, t)
			placed = append(placed, links...)
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("attach %s in %s: unknown program kind %d", t.Spec.Symbol, pf.Path, t.Spec.Prog)
		}
	}
	if len(calls) > 0 {
		links, err := a.attachCalls(ex, pf, calls)
		placed = append(placed, links...)
		if err != nil {
			return err
		}
	}
	a.links = append(a.links, placed...)
	a.trees = append(a.trees, trees...)
	if len(trees) > 0 {
		a.treeFiles = append(a.treeFiles, pf)
	}
	a.files[pf.Key] = pf
	return nil
}

// loaderLink places loader_state at t in ex, for every process (or a.pid).
func (a *attacher) loaderLink(ex *link.Executable, pf *probedFile, t target) (link.Link, error) {
	l, err := ex.Uprobe("", a.objs.LoaderState, &link.UprobeOptions{Address: t.Offset, PID: a.pid})
	if err != nil {
		return nil, fmt.Errorf("attach uprobe %s in %s: %w", t.Spec.Symbol, pf.Path, wrapPerm(err))
	}
	return l, nil
}

// widen makes the loader probes limited to one tree serve every process:
// a process outside that tree is about to be traced. Each gets its probe
// for every process before its tree probe is removed, so no rendezvous
// passes unprobed.
func (a *attacher) widen() error {
	a.tree = 0
	for _, pf := range a.treeFiles {
		ex, err := link.OpenExecutable(pf.OpenPath)
		if err != nil {
			return fmt.Errorf("open %s for uprobes: %w", pf.Path, err)
		}
		if alt := samePathOutside(pf); alt != "" {
			if ex2, err := link.OpenExecutable(alt); err == nil {
				ex = ex2
			}
		}
		for _, t := range pf.Targets {
			if t.Spec.Prog != progLoader {
				continue
			}
			l, err := a.loaderLink(ex, pf, t)
			if err != nil {
				return err
			}
			a.links = append(a.links, l)
		}
	}
	a.treeFiles = nil
	var first error
	for _, tp := range a.trees {
		if err := tp.Close(); err != nil && first == nil {
			first = err
		}
	}
	a.trees = nil
	return first
}

// attachCalls places call_return on every return instruction of the
// calls' functions (callFunc.Returns, each address once), then call_enter
// on their entries: as one uprobe_multi link each when the kernel has them
// (one syscall each way, and one RCU grace period to remove them all),
// else as single uprobes. Returns first, as for allocator specs: a return
// without its entry is counted as unpaired, an entry whose return is not
// probed yet would stay in flight. Never a uretprobe (see returns.go).
// Functions probed at their entry only (probeSpec.AtEntry) add no
// returns; a file with nothing else is probed with single uprobes.
func (a *attacher) attachCalls(ex *link.Executable, pf *probedFile, calls []target) ([]link.Link, error) {
	var offsets, cookies []uint64
	retCookie := make(map[uint64]uint64)
	for _, t := range calls {
		cookie := t.Spec.cookie()
		if t.Call == nil {
			return nil, fmt.Errorf("attach %s in %s: its return instructions are unknown", t.Spec.Symbol, pf.Path)
		}
		if t.Call.TailCalls {
			cookie |= uint64(bpfCallFlagsCALL_F_TAILS) << 32
		}
		offsets = append(offsets, t.Offset)
		cookies = append(cookies, cookie)
		if t.Spec.AtEntry {
			continue
		}
		for _, r := range t.Call.Returns {
			c := retCookie[r.Offset]
			if r.Own {
				c |= uint64(bpfRetFlagsRET_F_OWN)
			}
			retCookie[r.Offset] = c
		}
	}
	var rets, retCookies []uint64
	for off := range retCookie {
		rets = append(rets, off)
	}
	slices.Sort(rets)
	for _, off := range rets {
		retCookies = append(retCookies, retCookie[off])
	}
	if !a.noMulti && len(rets) > 0 {
		ret, err := ex.UprobeMulti(nil, a.objs.CallReturnMulti, &link.UprobeMultiOptions{Addresses: rets, Cookies: retCookies, PID: uint32(a.pid)})
		if err == nil {
			enter, err := ex.UprobeMulti(nil, a.objs.CallEnterMulti, &link.UprobeMultiOptions{Addresses: offsets, Cookies: cookies, PID: uint32(a.pid)})
			if err != nil {
				_ = ret.Close()
				return nil, fmt.Errorf("attach uprobe_multi (%d functions) in %s: %w", len(offsets), pf.Path, wrapPerm(err))
			}
			return []link.Link{ret, enter}, nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("attach uprobe_multi (%d return instructions) in %s: %w", len(rets), pf.Path, wrapPerm(err))
		}
		a.noMulti = true // an older kernel: one link per probe from now on
	}
	if err := a.need("call_return", "call_enter"); err != nil {
		return nil, fmt.Errorf("probe %s: %w", pf.Path, err)
	}
	var links []link.Link
	for i, off := range rets {
		l, err := ex.Uprobe("", a.objs.CallReturn, &link.UprobeOptions{Address: off, PID: a.pid, Cookie: retCookies[i]})
		if err != nil {
			return links, fmt.Errorf("attach uprobe at return %#x in %s: %w", off, pf.Path, wrapPerm(err))
		}
		links = append(links, l)
	}
	for i, off := range offsets {
		l, err := ex.Uprobe("", a.objs.CallEnter, &link.UprobeOptions{Address: off, PID: a.pid, Cookie: cookies[i]})
		if err != nil {
			return links, fmt.Errorf("attach uprobe at %#x in %s: %w", off, pf.Path, wrapPerm(err))
		}
		links = append(links, l)
	}
	return links, nil
}

// attachUSDT places usdt_block on one USDT site, with the site's argument
// spec in usdt_specs and its semaphore's reference counter raised by the
// kernel while the probe is attached (so the allocator fires it at all).
func (a *attacher) attachUSDT(ex *link.Executable, pf *probedFile, t target) (link.Link, error) {
	if a.nextSpec >= a.objs.UsdtSpecs.MaxEntries() {
		return nil, fmt.Errorf("attach %s in %s: more than %d USDT sites", t.Spec.Symbol, pf.Path, a.nextSpec)
	}
	id := a.nextSpec
	if err := a.objs.UsdtSpecs.Put(id, usdtSpec(t.USDT)); err != nil {
		return nil, fmt.Errorf("store USDT spec of %s in %s: %w", t.Spec.Symbol, pf.Path, err)
	}
	a.nextSpec++
	opts := &link.UprobeOptions{
		Address:      t.Offset,
		RefCtrOffset: t.USDT.SemaphoreOffset,
		PID:          a.pid,
		Cookie:       t.Spec.cookie() | uint64(id)<<32,
	}
	l, err := ex.Uprobe("", a.objs.UsdtBlock, opts)
	if err != nil {
		return nil, fmt.Errorf("attach USDT %s in %s: %w", t.Spec.Symbol, pf.Path, wrapPerm(err))
	}
	return l, nil
}

// attachSpec places spec_return on every return instruction of a function
// an allocator spec names (when its pointer is its result), then spec_enter
// on its entry. Returns first: a return without its entry is counted as
// unpaired, an entry whose return is not probed yet would pass unseen.
// Never a uretprobe: see bpf/vramprof.bpf.c, "allocator specs".
func (a *attacher) attachSpec(ex *link.Executable, pf *probedFile, t target) ([]link.Link, error) {
	if a.nextSpec >= a.objs.UsdtSpecs.MaxEntries() {
		return nil, fmt.Errorf("attach %s in %s: more than %d USDT sites and spec'd functions", t.Spec.Symbol, pf.Path, a.nextSpec)
	}
	id := a.nextSpec
	if err := a.objs.UsdtSpecs.Put(id, t.Func.Args); err != nil {
		return nil, fmt.Errorf("store spec of %s in %s: %w", t.Spec.Symbol, pf.Path, err)
	}
	a.nextSpec++
	cookie := t.Spec.cookie() | uint64(id)<<32
	if t.Func.AtReturn {
		cookie |= uint64(bpfSpecFlagsSPEC_F_AT_RETURN) << 24
	}
	var links []link.Link
	for _, off := range t.Func.Returns {
		l, err := ex.Uprobe("", a.objs.SpecReturn, &link.UprobeOptions{Address: off, PID: a.pid, Cookie: cookie})
		if err != nil {
			return links, fmt.Errorf("attach uprobe at return %#x of %s in %s: %w", off, t.Spec.Symbol, pf.Path, wrapPerm(err))
		}
		links = append(links, l)
	}
	l, err := ex.Uprobe("", a.objs.SpecEnter, &link.UprobeOptions{Address: t.Offset, PID: a.pid, Cookie: cookie})
	if err != nil {
		return links, fmt.Errorf("attach uprobe %s in %s: %w", t.Spec.Symbol, pf.Path, wrapPerm(err))
	}
	return append(links, l), nil
}

// usdtSpec converts a site's parsed arguments to the BPF contract's
// struct usdt_spec.
func usdtSpec(p *usdt.Probe) bpfUsdtSpec {
	var spec bpfUsdtSpec
	for i, arg := range p.Args {
		if i == len(spec.Args) {
			break
		}
		out := &spec.Args[i]
		size := arg.Size
		switch arg.Kind {
		case usdt.KindConst:
			out.Kind = uint8(bpfUsdtArgKindUSDT_ARG_CONST)
			out.ValOff = uint64(arg.Value)
		case usdt.KindReg:
			out.Kind = uint8(bpfUsdtArgKindUSDT_ARG_REG)
			out.RegOff = uint16(arg.Reg.ReadOffset())
			if arg.Reg.Width > 0 && arg.Reg.Width < size {
				size = arg.Reg.Width // 8@%eax: only 4 bytes are the value
			}
		case usdt.KindMem:
			out.Kind = uint8(bpfUsdtArgKindUSDT_ARG_MEM)
			out.RegOff = uint16(arg.Reg.ReadOffset())
			out.ValOff = uint64(arg.Offset)
		default:
			continue // USDT_ARG_NONE: reads as 0
		}
		out.Size = int8(size)
		if arg.Signed {
			out.Size = -out.Size
		}
	}
	return spec
}

// samePathOutside returns pf's path as this process sees it when that is
// the very file (same device and inode) the target maps, else "".
func samePathOutside(pf *probedFile) string {
	var st syscall.Stat_t
	if err := syscall.Stat(pf.Path, &st); err != nil {
		return ""
	}
	if (fileKey{Dev: st.Dev, Inode: st.Ino}) != pf.Key {
		return ""
	}
	return pf.Path
}

// Close removes every probe, newest first, and returns the first error.
func (a *attacher) Close() error {
	var first error
	for i := len(a.links) - 1; i >= 0; i-- {
		if err := a.links[i].Close(); err != nil && first == nil {
			first = fmt.Errorf("detach probe: %w", err)
		}
	}
	a.links = nil
	for i := len(a.trees) - 1; i >= 0; i-- {
		if err := a.trees[i].Close(); err != nil && first == nil {
			first = fmt.Errorf("detach probe: %w", err)
		}
	}
	a.trees = nil
	return first
}

// wrapPerm marks permission failures with ErrNotPermitted so the CLI can say
// which privilege is missing.
func wrapPerm(err error) error {
	if errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	if isPermission(err) {
		return fmt.Errorf("%w: %w", ErrNotPermitted, err)
	}
	return err
}
