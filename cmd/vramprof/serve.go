package main

import "fmt"

// defaultListen is serve's address: loopback, so that nothing is exposed
// beyond the node until the operator says so (a Prometheus on the node, or
// --listen on the pod IP behind a NetworkPolicy).
const defaultListen = "127.0.0.1:9400"

func (f *serveFlags) check() error {
	const usage = "usage: vramprof serve [--listen 127.0.0.1:9400] [--grace D] [--ttl D] [--pool auto|off] [--nvml auto|off] [--allocators FILE] [--python auto|off] [--python-depth N] [-q]"
	if err := f.probeFlags.check("serve"); err != nil {
		return err
	}
	if err := checkAutoOff("serve", "nvml", f.NVML); err != nil {
		return err
	}
	if len(f.Extra) > 0 {
		return usageError(fmt.Errorf("serve: unexpected argument %q; %s", f.Extra[0], usage))
	}
	if f.Grace <= 0 || f.TTL < f.Grace {
		return usageError(fmt.Errorf("serve: need 0 < --grace (%s) <= --ttl (%s)", f.Grace, f.TTL))
	}
	return nil
}
