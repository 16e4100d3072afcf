package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/vramprof/vramprof/report/compare"
	"github.com/vramprof/vramprof/report/recorder"
)

func parseDiff(args []string) (*diffFlags, error) {
	c, err := parseCommand("diff", args)
	if err != nil {
		return nil, err
	}
	o := &c.Diff
	if len(o.Paths) != 2 {
		return nil, usageError(errors.New("diff: give BASE and NEW (output directories, .vpt traces or report.json files)"))
	}
	if o.Format != "text" && o.Format != "json" {
		return nil, usageError(fmt.Errorf("diff: unknown --format %q; use text or json", o.Format))
	}
	return o, nil
}

// diffCmd compares two recordings (package compare). It needs no
// privileges.
func diffCmd(o *diffFlags, stdout io.Writer) error {
	base, err := recorder.LoadSnapshot(o.Paths[0])
	if err != nil {
		return fmt.Errorf("diff: BASE %s: %w", o.Paths[0], err)
	}
	nw, err := recorder.LoadSnapshot(o.Paths[1])
	if err != nil {
		return fmt.Errorf("diff: NEW %s: %w", o.Paths[1], err)
	}
	d := compare.NewDiff(base, nw)
	var buf bytes.Buffer
	if o.Format == "json" {
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
