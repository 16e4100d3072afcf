package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/vramprof/vramprof/report/compare"
	"github.com/vramprof/vramprof/report/recorder"
)

// diffOptions are the flags of `vramprof diff`.
type diffOptions struct {
	base, new string
	format    string
}

func parseDiff(args []string) (*diffOptions, error) {
	c, err := parseCommand("diff", args)
	if err != nil {
		return nil, err
	}
	o := &diffOptions{format: c.Diff.Format}
	positional := c.Diff.Paths
	if len(positional) != 2 {
		return nil, usageError(errors.New("diff: give BASE and NEW (output directories, .vpt traces or report.json files)"))
	}
	o.base, o.new = positional[0], positional[1]
	if o.format != "text" && o.format != "json" {
		return nil, usageError(fmt.Errorf("diff: unknown --format %q; use text or json", o.format))
	}
	return o, nil
}

// diffCmd compares two recordings (package compare). It needs no
// privileges.
func diffCmd(o *diffOptions, stdout io.Writer) error {
	base, err := recorder.LoadSnapshot(o.base)
	if err != nil {
		return fmt.Errorf("diff: BASE %s: %w", o.base, err)
	}
	nw, err := recorder.LoadSnapshot(o.new)
	if err != nil {
		return fmt.Errorf("diff: NEW %s: %w", o.new, err)
	}
	d := compare.NewDiff(base, nw)
	var buf bytes.Buffer
	if o.format == "json" {
		if err := d.WriteJSON(&buf); err != nil {
			return fmt.Errorf("diff: encode: %w", err)
		}
	} else {
		d.WriteText(&buf)
	}
	if _, err := stdout.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("diff: write: %w", err)
	}
	return nil
}
