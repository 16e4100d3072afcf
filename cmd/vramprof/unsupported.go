//go:build !linux

package main

import (
	"context"
	"errors"
)

// errLinuxOnly: tracing needs Linux's eBPF and uprobes. `vramprof report`
// works anywhere.
var errLinuxOnly = errors.New("tracing needs Linux (eBPF uprobes); `vramprof report` works on this system")

func run(context.Context, *runFlags) (int, error) { return 0, errLinuxOnly }

func attach(context.Context, *attachFlags) error { return errLinuxOnly }

func serve(context.Context, *serveFlags) error { return errLinuxOnly }
