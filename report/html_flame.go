package report

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/analysis"
)

// The icicle of report.html: the stacks live at a process's peak merged
// into a tree, outermost frame on top and the allocating call at the
// bottom, each frame as wide as the bytes live under it.

const (
	flameW   = 1000
	flameRow = 18
	// flameMinWidth drops frames narrower than this (SVG units) from the
	// drawing: they could show no label and would only grow the file. Their
	// bytes still count in their parents' widths.
	flameMinWidth = 0.5
	// flameMaxNodes bounds the frames drawn per icicle, so the page stays
	// small whatever the number of distinct stacks.
	flameMaxNodes = 1500
	// flameCharW is the width of a label character at the icicle's font
	// size, used to cut labels to fit their frame.
	flameCharW = 6.6
)

// flame is one process's icicle. The page's script zooms into a frame
// when it is clicked and highlights the frames a search matches, from each
// frame's data attributes (flameNode's Level, Offset, Bytes and Name).
type flame struct {
	Title   string
	Caption string
	W, H    int
	Total   uint64 // the bytes the full width stands for
	Nodes   []flameNode
	Hidden  int // frames too narrow to draw
	Stacks  []htmlSite
	More    int
}

// flameNode is one frame drawn. Nodes are in depth-first order, so a
// frame's descendants follow it up to the next frame at its level or
// above: the script zooms on that.
type flameNode struct {
	X, Y, W string
	TextX   string
	TextY   string
	Label   string // cut to fit; empty when nothing fits
	Title   string // the tooltip: the whole frame and its bytes
	Name    string // the whole frame, for the script's labels and search
	Fill    string
	Level   int
	// Offset is the bytes left of the frame in the full icicle; Bytes its
	// own.
	Offset, Bytes uint64
}

// frameNode is a frame of the merged tree.
type frameNode struct {
	name     string
	runtime  bool
	bytes    uint64
	count    uint64
	children []*frameNode
	index    map[string]*frameNode
}

func (n *frameNode) child(name string, runtime bool) *frameNode {
	if c := n.index[name]; c != nil {
		return c
	}
	c := &frameNode{name: name, runtime: runtime, index: map[string]*frameNode{}}
	n.index[name] = c
	n.children = append(n.children, c)
	return c
}

// newFlame builds the icicle of p's peak; nil when nothing was live.
func newFlame(res *analysis.Result, p *analysis.Process) *flame {
	if p.PeakEvent == nil || p.Totals.PeakBytes == 0 || len(p.PeakStacks) == 0 {
		return nil
	}
	root := &frameNode{index: map[string]*frameNode{}}
	for _, u := range p.PeakStacks {
		if u.Bytes == 0 {
			continue
		}
		root.bytes += u.Bytes
		root.count += u.Count
		lines := res.Lines(u.Stack)
		var rt []bool
		if s := res.Stacks[u.Stack]; s != nil && len(s.Runtime) == len(lines) {
			rt = s.Runtime
		}
		n := root
		// The outermost frames without a symbol (libc's
		// __libc_start_call_main as a bare address) say nothing and
		// would split the same caller by return address: start at the
		// first named frame, merging what is under them.
		top := len(lines) - 1
		if s := res.Stacks[u.Stack]; s != nil && len(s.Frames) == len(lines) {
			for top > 0 && s.Frames[top].Function == "" {
				top--
			}
		}
		for i := top; i >= 0; i-- { // Lines are leaf first
			n = n.child(lines[i], rt != nil && rt[i])
			n.bytes += u.Bytes
			n.count += u.Count
		}
	}
	if root.bytes == 0 {
		return nil
	}
	f := &flame{W: flameW, Total: root.bytes,
		Title: fmt.Sprintf("Stacks at the peak of %s: %s at %s", procLabel(res, p), bytesText(p.Totals.PeakBytes),
			secs(res, p.PeakTime)),
		Caption: "Outermost frame on top, the allocating call at the bottom; each frame is as wide as the bytes live under it at the peak. " +
			"Hover a frame for its bytes, click it to zoom in; search highlights the frames whose names match."}
	depth := 0
	var walk func(n *frameNode, x float64, off uint64, level int)
	walk = func(n *frameNode, x float64, off uint64, level int) {
		slices.SortStableFunc(n.children, func(a, b *frameNode) int {
			return cmp.Or(cmp.Compare(b.bytes, a.bytes), cmp.Compare(a.name, b.name))
		})
		for _, c := range n.children {
			w := flameW * float64(c.bytes) / float64(root.bytes)
			if w < flameMinWidth || len(f.Nodes) >= flameMaxNodes {
				f.Hidden++
				x += w
				off += c.bytes
				continue
			}
			y := float64(level * flameRow)
			depth = max(depth, level+1)
			node := flameNode{X: f1(x), Y: f1(y), W: f1(max(w-0.5, 0.5)), TextX: f1(x + 3), TextY: f1(y + 12.5),
				Label: fitLabel(c.name, w-6), Fill: frameColor(c.name, c.runtime), Name: c.name,
				Level: level, Offset: off, Bytes: c.bytes,
				Title: fmt.Sprintf("%s\n%s, %.1f%% of the peak, in %d allocations", c.name, bytesText(c.bytes),
					pct(c.bytes, p.Totals.PeakBytes), c.count)}
			f.Nodes = append(f.Nodes, node)
			walk(c, x, off, level+1)
			x += w
			off += c.bytes
		}
	}
	walk(root, 0, 0, 0)
	f.H = max(depth, 1) * flameRow
	f.Stacks, f.More = htmlSites(res, p.PeakStacks)
	return f
}

// fitLabel cuts a frame's name to the characters that fit in w units.
func fitLabel(name string, w float64) string {
	n := int(w / flameCharW)
	r := []rune(name)
	switch {
	case n < 3:
		return ""
	case len(r) <= n:
		return name
	}
	return strings.TrimSpace(string(r[:n-1])) + "…"
}

// frameColor gives a frame a warm color fixed by its name (the same frame
// has the same color in every icicle and every run), Python frames a
// yellow-green and the CUDA runtime's a grey-blue.
func frameColor(name string, runtime bool) string {
	if runtime {
		return "#b6c4d6"
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	v := h.Sum32()
	if strings.Contains(name, ".py:") {
		return fmt.Sprintf("hsl(%d,55%%,%d%%)", 55+v%25, 62+(v>>8)%12)
	}
	return fmt.Sprintf("hsl(%d,75%%,%d%%)", 8+v%34, 62+(v>>8)%12)
}
