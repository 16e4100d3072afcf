//go:build linux

package probes

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// attacher owns the uprobe links. Each file (by device and inode) is probed
// once: uprobes live on the inode, so one set of links serves every process
// that maps the file, and the BPF targets map filters by process. Not safe
// for concurrent use: the session's reader goroutine is its only user after
// start-up.
type attacher struct {
	objs  *bpfObjects
	pid   int // perf-level process filter; 0 for none (every target is in the BPF map)
	links []link.Link
	files map[fileKey]*probedFile
}

func newAttacher(objs *bpfObjects, pid int) *attacher {
	return &attacher{objs: objs, pid: pid, files: make(map[fileKey]*probedFile)}
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
	ex, err := link.OpenExecutable(pf.OpenPath)
	if err != nil {
		return fmt.Errorf("open %s for uprobes: %w", pf.Path, err)
	}
	var placed []link.Link
	defer func() {
		if err != nil {
			for i := len(placed) - 1; i >= 0; i-- {
				_ = placed[i].Close()
			}
		}
	}()
	for _, t := range pf.Targets {
		opts := &link.UprobeOptions{Address: t.Offset, PID: a.pid, Cookie: uint64(t.Spec.API)}
		switch t.Spec.Prog {
		case progAlloc:
			// The entry first: a return without its entry is counted as
			// unpaired, an entry without its return would be a lost event.
			l, err := ex.Uprobe("", a.objs.AllocEnter, opts)
			if err != nil {
				return fmt.Errorf("attach uprobe %s in %s: %w", t.Spec.Symbol, pf.Path, wrapPerm(err))
			}
			placed = append(placed, l)
			l, err = ex.Uretprobe("", a.objs.AllocReturn, opts)
			if err != nil {
				return fmt.Errorf("attach uretprobe %s in %s: %w", t.Spec.Symbol, pf.Path, wrapPerm(err))
			}
			placed = append(placed, l)
		case progFree, progLoader:
			prog := a.objs.FreeEnter
			if t.Spec.Prog == progLoader {
				prog = a.objs.LoaderState
			}
			l, err := ex.Uprobe("", prog, opts)
			if err != nil {
				return fmt.Errorf("attach uprobe %s in %s: %w", t.Spec.Symbol, pf.Path, wrapPerm(err))
			}
			placed = append(placed, l)
		default:
			return fmt.Errorf("attach %s in %s: unknown program kind %d", t.Spec.Symbol, pf.Path, t.Spec.Prog)
		}
	}
	a.links = append(a.links, placed...)
	a.files[pf.Key] = pf
	return nil
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
