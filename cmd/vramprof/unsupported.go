//go:build !linux

package main

import (
	"context"
	"errors"
)

// errLinuxOnly: tracing needs Linux's eBPF and uprobes. `vramprof report`
// works anywhere.
var errLinuxOnly = errors.New("tracing needs Linux (eBPF uprobes); `vramprof report` works on this system")

func (*runFlags) exec(context.Context) (int, error) { return 0, errLinuxOnly }

func (*attachFlags) exec(context.Context) (int, error) { return 0, errLinuxOnly }

func (*serveFlags) exec(context.Context) (int, error) { return 0, errLinuxOnly }
