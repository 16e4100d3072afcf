//go:build linux

package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report/exporter"
)

// cgroup2Root is where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup
// on a v2 host, /sys/fs/cgroup/unified on a hybrid one; "" when neither.
func cgroup2Root() string {
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st syscall.Statfs_t
		if syscall.Statfs(d, &st) == nil && st.Type == 0x63677270 { // CGROUP2_SUPER_MAGIC
			return d
		}
	}
	return ""
}

// TestServeKubernetesLabels places longrun in a cgroup laid out as the
// kubelet's systemd driver lays out a Burstable pod's container
// (kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID with
// _>.slice/cri-containerd-<ID>.scope), then runs serve: longrun's series
// carry the pod's UID (dashes back), the container ID and the cgroup path,
// with its traced phase's truth.
func TestServeKubernetesLabels(t *testing.T) {
	probetest.RequirePrivilege(t)
	root := cgroup2Root()
	if root == "" {
		skipOrFail(t, "no cgroup v2 hierarchy mounted")
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s-%d-%d", t.Name(), os.Getpid(), time.Now().UnixNano())))
	id := fmt.Sprintf("%x", sum)
	uid := fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	levels := []string{"kubepods.slice", "kubepods-burstable.slice",
		"kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice", "cri-containerd-" + id + ".scope"}
	cgPath := "/" + strings.Join(levels, "/")
	dir := filepath.Join(root, cgPath)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Cleanup(func() {
		// Bottom up, each once empty (longrun is killed at cleanup first:
		// cleanups run in reverse order).
		for i := len(levels); i > 0; i-- {
			d := filepath.Join(root, filepath.Join(levels[:i]...))
			for range 100 {
				if err := os.Remove(d); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})

	// Into the cgroup, then longrun itself (exec keeps the PID).
	name := fmt.Sprintf("kubejob-%d", os.Getpid())
	cmd := exec.Command("bash", "-c", `echo $$ > "$1/cgroup.procs" && exec -a "$2" "$3"`, "_", dir, name, probetest.Bin(t, "longrun"))
	lr := startLongrunCmd(t, cmd)
	addr := freeLoopback(t)
	_, stop := startDaemon(t, nil, "vramprof: serving http://"+addr, "serve", "--listen", addr)
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
	lr.expect(t, "done")
	truth := probetest.MustReadTruth(t, lr.truth)

	group := map[string]string{"command": name, "pod_uid": uid, "container": id, "cgroup": cgPath}
	var fams famSets
	deadline := time.Now().Add(20 * time.Second)
	for {
		fams = fleetFamilies(scrapeMetrics(t, "http://"+addr), group)
		if fams.sum(exporter.MetricFrees) == float64(truth.Totals.Frees) && fams.sum(exporter.MetricUnknownFrees) == float64(truth.Totals.UnknownFrees) {
			break
		}
		require.True(t, time.Now().Before(deadline), "no series %v with longrun's %d frees: %v", group, truth.Totals.Frees,
			fleetFamilies(scrapeMetrics(t, "http://"+addr), map[string]string{"command": name}))
		time.Sleep(100 * time.Millisecond)
	}
	for metric, want := range map[string]uint64{
		exporter.MetricAllocations:      truth.Totals.Allocations,
		exporter.MetricAllocatedBytes:   truth.Totals.AllocatedBytes,
		exporter.MetricLiveBytes:        truth.Totals.LiveBytesAtEnd,
		exporter.MetricRunningProcesses: 1,
	} {
		assert.Equal(t, float64(want), fams.sum(metric), metric)
	}
	t.Logf("pod_uid=%s container=%s: %d allocations, %d bytes live (truth)", uid, id[:12], truth.Totals.Allocations, truth.Totals.LiveBytesAtEnd)
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGTERM))
	<-lr.exit
	stop()
}
