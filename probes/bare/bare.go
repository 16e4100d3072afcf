//go:build linux

package bare

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Probe is a loaded and attached counting probe. It must be Closed.
type Probe struct {
	objs  bpfObjects
	links []link.Link
}

// Attach loads the counting programs and attaches them to allocFn (entry and
// return) and freeFn (entry) at the given file offsets of the file at path.
func Attach(path string, allocOff, freeOff uint64) (*Probe, error) {
	p := &Probe{}
	if err := loadBpfObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load counting probe: %w", err)
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	for _, a := range []struct {
		off uint64
		ret bool
		fn  func(string, *ebpf.Program, *link.UprobeOptions) (link.Link, error)
		prg *ebpf.Program
	}{
		{allocOff, false, ex.Uprobe, p.objs.CountEnter},
		{allocOff, true, ex.Uretprobe, p.objs.CountReturn},
		{freeOff, false, ex.Uprobe, p.objs.CountFree},
	} {
		l, err := a.fn("", a.prg, &link.UprobeOptions{Address: a.off})
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("attach counting probe at %#x in %s: %w", a.off, path, err)
		}
		p.links = append(p.links, l)
	}
	return p, nil
}

// Counts returns the hits so far: allocation entries, returns and frees.
func (p *Probe) Counts() (enters, returns, frees uint64, err error) {
	if err = p.objs.Enters.Get(&enters); err != nil {
		return
	}
	if err = p.objs.Returns.Get(&returns); err != nil {
		return
	}
	err = p.objs.Frees.Get(&frees)
	return
}

// Close detaches and unloads, newest first.
func (p *Probe) Close() error {
	var first error
	for i := len(p.links) - 1; i >= 0; i-- {
		if err := p.links[i].Close(); err != nil && first == nil {
			first = err
		}
	}
	if err := p.objs.Close(); err != nil && first == nil {
		first = err
	}
	return first
}
