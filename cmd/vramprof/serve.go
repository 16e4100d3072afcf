package main

import (
	"fmt"
	"time"

	"github.com/vramprof/vramprof/probes/allocspec"
	"github.com/vramprof/vramprof/report/exporter"
)

// defaultListen is serve's address: loopback, so that nothing is exposed
// beyond the node until the operator says so (a Prometheus on the node, or
// --listen on the pod IP behind a NetworkPolicy).
const defaultListen = "127.0.0.1:9400"

type serveOptions struct {
	listen string
	pool   string
	nvml   string // --nvml auto|off: serve the device layer's gauges
	python pythonFlags
	allocs []allocspec.Allocator
	grace  time.Duration
	ttl    time.Duration
	quiet  bool
}

func parseServe(args []string) (*serveOptions, error) {
	const usage = "usage: vramprof serve [--listen 127.0.0.1:9400] [--grace D] [--ttl D] [--pool auto|off] [--nvml auto|off] [--allocators FILE] [--python auto|off] [--python-depth N] [-q]"
	fs := newFlagSet("serve")
	o := &serveOptions{}
	fs.StringVar(&o.listen, "listen", defaultListen, "address to serve metrics and profiles on (host:port)")
	fs.DurationVar(&o.grace, "grace", exporter.DefaultGrace, "keep an exited process's figures at least this long")
	fs.DurationVar(&o.ttl, "ttl", exporter.DefaultTTL, "drop an exited process after this long even if never scraped")
	fs.StringVar(&o.pool, "pool", "auto", "trace framework allocators' blocks (PyTorch's USDT probes, allocator specs): auto or off")
	fs.StringVar(&o.nvml, "nvml", "auto", "serve each device's memory as NVML reports it: auto or off")
	allocatorsFlag(fs, &o.allocs)
	o.python.define(fs)
	addQuiet(fs, &o.quiet)
	if err := parseFlags(fs, usage, args); err != nil {
		return nil, err
	}
	if err := checkAutoOff("serve", "pool", o.pool); err != nil {
		return nil, err
	}
	if err := checkAutoOff("serve", "nvml", o.nvml); err != nil {
		return nil, err
	}
	if err := o.python.check("serve"); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usageError(fmt.Errorf("serve: unexpected argument %q; %s", fs.Arg(0), usage))
	}
	if o.grace <= 0 || o.ttl < o.grace {
		return nil, usageError(fmt.Errorf("serve: need 0 < --grace (%s) <= --ttl (%s)", o.grace, o.ttl))
	}
	return o, nil
}
