package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/report/exporter"
)

func TestParseServe(t *testing.T) {
	o, err := parse[*serveFlags]("serve", nil)
	require.NoError(t, err)
	// Loopback by default, and not dcgm-exporter's 9400, which runs beside
	// serve on every GPU node.
	assert.Equal(t, "127.0.0.1:10477", o.Listen)
	assert.Equal(t, exporter.DefaultGrace, o.Grace)
	assert.Equal(t, exporter.DefaultTTL, o.TTL)
	assert.Equal(t, "auto", o.Pool)
	assert.Equal(t, "auto", o.NVML)
	assert.Equal(t, []string{"/run/containerd/io.containerd.runtime.v2.task/k8s.io", "/run/containers/storage/overlay-containers"}, o.RuntimeDirs)

	o, err = parse[*serveFlags]("serve", []string{"--runtime-dirs", "/host/run/containerd/io.containerd.runtime.v2.task/k8s.io/,/host/crio"})
	require.NoError(t, err)
	assert.Equal(t, []string{"/host/run/containerd/io.containerd.runtime.v2.task/k8s.io", "/host/crio"}, o.RuntimeDirs)
	o, err = parse[*serveFlags]("serve", []string{"--runtime-dirs", ""})
	require.NoError(t, err)
	assert.Empty(t, o.RuntimeDirs, "none read")

	o, err = parse[*serveFlags]("serve", []string{"--listen", "127.0.0.1:0", "--grace", "5s", "--ttl", "1m", "--pool", "off", "--nvml", "off", "-q"})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:0", o.Listen)
	assert.Equal(t, 5*time.Second, o.Grace)
	assert.Equal(t, time.Minute, o.TTL)
	assert.True(t, o.Quiet)
	assert.Equal(t, "off", o.NVML)

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"argument", []string{"extra"}},
		{"pool", []string{"--pool", "maybe"}},
		{"nvml", []string{"--nvml", "on"}},
		{"ttl below grace", []string{"--grace", "1m", "--ttl", "10s"}},
		{"zero grace", []string{"--grace", "0s"}},
		{"relative runtime dir", []string{"--runtime-dirs", "run/containerd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse[*serveFlags]("serve", tc.args)
			assert.Error(t, err)
		})
	}
}
