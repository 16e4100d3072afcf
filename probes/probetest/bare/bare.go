//go:build linux

package bare

import (
	"fmt"

	"github.com/cilium/ebpf/link"
)

// Probe is a loaded and attached counting probe. It must be Closed.
type Probe struct {
	objs  bpfObjects
	links []link.Link
}

// Attach loads the counting programs and attaches them, at entry and return
// as vramprof does (uprobe_multi links), to the functions at the given file
// offsets of the file at path.
func Attach(path string, offsets ...uint64) (*Probe, error) {
	p := &Probe{}
	if err := loadBpfObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load counting probe: %w", err)
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	opts := &link.UprobeMultiOptions{Addresses: offsets}
	enter, err := ex.UprobeMulti(nil, p.objs.CountEnter, opts)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("attach counting probe in %s: %w", path, err)
	}
	p.links = append(p.links, enter)
	ret, err := ex.UretprobeMulti(nil, p.objs.CountReturn, opts)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("attach counting return probe in %s: %w", path, err)
	}
	p.links = append(p.links, ret)
	return p, nil
}

// AttachSites loads the counting programs and attaches count_site to USDT
// probe sites at the given file offsets, each with the reference counter
// (semaphore) at the matching offset raised, as vramprof attaches them.
func AttachSites(path string, offsets, refCtrs []uint64) (*Probe, error) {
	p := &Probe{}
	if err := loadBpfObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load counting probe: %w", err)
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	for i, off := range offsets {
		l, err := ex.Uprobe("", p.objs.CountSite, &link.UprobeOptions{Address: off, RefCtrOffset: refCtrs[i]})
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("attach counting probe at %#x in %s: %w", off, path, err)
		}
		p.links = append(p.links, l)
	}
	return p, nil
}

// Sites returns the USDT site hits so far.
func (p *Probe) Sites() (uint64, error) {
	var n uint64
	err := p.objs.Sites.Get(&n)
	return n, err
}

// Counts returns the hits so far: function entries and returns.
func (p *Probe) Counts() (enters, returns uint64, err error) {
	if err = p.objs.Enters.Get(&enters); err != nil {
		return
	}
	err = p.objs.Returns.Get(&returns)
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
