package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/report/compare"
)

func (o *diffFlags) check() error {
	if len(o.Paths) != 2 {
		return usageError(errors.New("diff: give BASE and NEW (output directories, .vpt traces or report.json files)"))
	}
	if o.Format != "text" && o.Format != "json" {
		return usageError(fmt.Errorf("diff: unknown --format %q; use text or json", o.Format))
	}
	return nil
}

// exec compares two recordings (package compare). It needs no
// privileges.
func (o *diffFlags) exec(context.Context) (int, error) {
	base, err := recorder.LoadFigures(o.Paths[0])
	if err != nil {
		return 0, fmt.Errorf("diff: BASE %s: %w", o.Paths[0], err)
	}
	nw, err := recorder.LoadFigures(o.Paths[1])
	if err != nil {
		return 0, fmt.Errorf("diff: NEW %s: %w", o.Paths[1], err)
	}
	if err := compare.NewDiff(base, nw).Write(os.Stdout, o.Format); err != nil {
		return 0, fmt.Errorf("diff: %w", err)
	}
	return 0, nil
}
