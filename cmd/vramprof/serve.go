package main

import (
	"fmt"
	"time"

	"github.com/vramprof/vramprof/probes/allocspec"
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
	c, err := parseCommand("serve", args)
	if err != nil {
		return nil, err
	}
	f := &c.Serve
	o := &serveOptions{listen: f.Listen, grace: f.Grace, ttl: f.TTL, pool: f.Pool, nvml: f.NVML, python: f.Python, quiet: f.Quiet}
	if o.allocs, err = f.probeFlags.options("serve"); err != nil {
		return nil, err
	}
	if err := checkAutoOff("serve", "nvml", o.nvml); err != nil {
		return nil, err
	}
	if len(f.Extra) > 0 {
		return nil, usageError(fmt.Errorf("serve: unexpected argument %q; %s", f.Extra[0], usage))
	}
	if o.grace <= 0 || o.ttl < o.grace {
		return nil, usageError(fmt.Errorf("serve: need 0 < --grace (%s) <= --ttl (%s)", o.grace, o.ttl))
	}
	return o, nil
}
