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

// Attach loads the counting programs and attaches them to the functions at
// the given file offsets of the file at path: at their entries (a
// uprobe_multi link) and at their returns through a uretprobe_multi link,
// as vramprof did before it stopped using uretprobes. AttachAtReturns is
// what it does now.
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

// AttachAtReturns loads the counting programs and attaches them as
// vramprof attaches call_enter and call_return: count_enter at the entries
// and count_ret_insn at the return instructions (file offsets of the file
// at path), each through one uprobe_multi link. Never a uretprobe.
func AttachAtReturns(path string, entries, returns []uint64) (*Probe, error) {
	p := &Probe{}
	if err := loadBpfObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load counting probe: %w", err)
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	ret, err := ex.UprobeMulti(nil, p.objs.CountRetInsn, &link.UprobeMultiOptions{Addresses: returns})
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("attach counting probe at %d return instructions in %s: %w", len(returns), path, err)
	}
	p.links = append(p.links, ret)
	enter, err := ex.UprobeMulti(nil, p.objs.CountEnter, &link.UprobeMultiOptions{Addresses: entries})
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("attach counting probe in %s: %w", path, err)
	}
	p.links = append(p.links, enter)
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

// Runs returns what the counting programs have cost so far, from the
// kernel's BPF stats: entry (count_enter), return (count_ret_insn and
// count_return) and site (count_site). Zero unless the stats are on
// (ebpf.EnableStats).
func (p *Probe) Runs() (entry, ret, site ebpf.ProgramStats, err error) {
	add := func(into *ebpf.ProgramStats, progs ...*ebpf.Program) {
		for _, prog := range progs {
			st, e := prog.Stats()
			if e != nil {
				if err == nil {
					err = fmt.Errorf("bpf stats of %s: %w", prog, e)
				}
				continue
			}
			into.Runtime += st.Runtime
			into.RunCount += st.RunCount
		}
	}
	add(&entry, p.objs.CountEnter)
	add(&ret, p.objs.CountRetInsn, p.objs.CountReturn)
	add(&site, p.objs.CountSite)
	return entry, ret, site, err
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
