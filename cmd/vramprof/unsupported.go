//go:build !linux

package main

import (
	"context"
	"errors"
	"io"
	"os"
)

// errLinuxOnly: tracing needs Linux's eBPF and uprobes. `vramprof report`
// works anywhere.
var errLinuxOnly = errors.New("tracing needs Linux (eBPF uprobes); `vramprof report` works on this system")

func run(context.Context, *runOptions) (int, error) { return 0, errLinuxOnly }

func attach(context.Context, *attachOptions) error { return errLinuxOnly }

func serve(context.Context, *serveOptions) error { return errLinuxOnly }

// isTerminalWriter reports whether w is a terminal (a character device
// other than /dev/null, as near as this system lets us tell portably).
func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f.Name() == os.DevNull {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
