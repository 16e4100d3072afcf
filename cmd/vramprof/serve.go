package main

import (
	"fmt"
	"path/filepath"
)

// defaultListen is serve's address: loopback, so that nothing is exposed
// beyond the node until the operator says so (a Prometheus on the node, or
// --listen on the pod IP behind a NetworkPolicy). Its port, 10477, is not
// 9400, dcgm-exporter's default: the two run side by side on every GPU
// node. The exporters' range 9100-9999 is allocated in full (Prometheus's
// default port allocations list), so any port there is some exporter's;
// 10477 is taken by none of the daemons a GPU node runs (node_exporter
// 9100, dcgm-exporter 9400, nvidia_gpu_exporter 9835, the kubelet and
// kube-proxy 10248-10259, the Zabbix agent 10050).
const (
	defaultPort   = "10477"
	defaultListen = "127.0.0.1:" + defaultPort
)

func (f *serveFlags) check() error {
	if err := f.probeFlags.check("serve"); err != nil {
		return err
	}
	if err := checkAutoOff("serve", "nvml", f.NVML); err != nil {
		return err
	}
	if f.Grace <= 0 || f.TTL < f.Grace {
		return usageError(fmt.Errorf("serve: need 0 < --grace (%s) <= --ttl (%s)", f.Grace, f.TTL))
	}
	// "" reads no runtime directory: --runtime-dirs "" turns the pod
	// labels off.
	dirs := f.RuntimeDirs[:0]
	for _, d := range f.RuntimeDirs {
		switch {
		case d == "":
		case !filepath.IsAbs(d):
			return usageError(fmt.Errorf("serve: --runtime-dirs: %q is not an absolute path (the node's, as mounted in serve's container)", d))
		default:
			dirs = append(dirs, filepath.Clean(d))
		}
	}
	f.RuntimeDirs = dirs
	return nil
}
