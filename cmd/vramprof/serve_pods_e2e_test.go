//go:build linux

package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report/exporter"
)

// kubeContainer is a container the test lays out as a node's kubelet and
// runtime would: a cgroup in one of Kubernetes' layouts and, unless bundle
// is nil, an OCI bundle's config.json with those annotations.
type kubeContainer struct {
	name    string // the case; longrun's argv0 (the command label)
	id, uid string // container ID, pod UID (the cgroup path's)
	crio    bool   // CRI-O's bundle layout, else containerd's
	levels  []string
	bundle  map[string]string
	// What the series must carry: the annotations' values when the
	// bundle is believed, else "".
	pod, ns, ctrName string
	cgPath, dir      string // the cgroup's path and directory
	lr               *longrun
	truth            *probetest.Truth
}

// TestServeKubernetesPods runs longrun in four containers laid out as the
// kubelet and the runtimes lay them out (cgroups in Kubernetes' systemd
// and cgroupfs layouts; bundles' config.json in a temporary runtime
// directory for each runtime, given by --runtime-dirs) and scrapes serve:
//
//   - containerd, systemd layout (cri-containerd-<ID>.scope): the series
//     carry the pod, namespace and container name its bundle's
//     io.kubernetes.cri.* annotations give;
//   - CRI-O, cgroupfs layout (/kubepods/<qos>/pod<UID>/crio-<ID>): those
//     of its io.kubernetes.pod.* / container.name annotations;
//   - a bundle whose pod UID is another pod's: no pod, namespace or
//     container_name (pod_uid kept), and a note saying why;
//   - no bundle at all: none either.
//
// Each series holds its longrun's traced phase (its truth), and the
// expected labels are the values the test wrote.
func TestServeKubernetesPods(t *testing.T) {
	probetest.RequirePrivilege(t)
	root := cgroup2Root()
	if root == "" {
		skipOrFail(t, "no cgroup v2 hierarchy mounted")
	}
	runtimes := t.TempDir()
	containerdDir := filepath.Join(runtimes, "containerd", "io.containerd.runtime.v2.task", "k8s.io")
	crioDir := filepath.Join(runtimes, "containers", "storage", "overlay-containers")

	seed := fmt.Sprintf("%s-%d-%d", t.Name(), os.Getpid(), time.Now().UnixNano())
	ids := func(n int) (id, uid string) {
		s := sha256.Sum256([]byte(fmt.Sprintf("%s-%d", seed, n)))
		return fmt.Sprintf("%x", s), fmt.Sprintf("%x-%x-%x-%x-%x", s[0:4], s[4:6], s[6:8], s[8:10], s[10:16])
	}
	tag := fmt.Sprintf("%d", os.Getpid())
	var cs []*kubeContainer
	for i, c := range []kubeContainer{
		{name: "containerd", pod: "trainer-" + tag + "-0", ns: "ml-" + tag, ctrName: "main"},
		{name: "crio", crio: true, pod: "eval-" + tag + "-7", ns: "ml-dev-" + tag, ctrName: "worker"},
		{name: "uidmismatch"},
		{name: "nobundle", crio: true},
	} {
		c.name = fmt.Sprintf("kube%s-%s", c.name, tag)
		c.id, c.uid = ids(i)
		us := strings.ReplaceAll(c.uid, "-", "_")
		switch i {
		case 0:
			c.levels = []string{"kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-pod" + us + ".slice", "cri-containerd-" + c.id + ".scope"}
			c.bundle = map[string]string{
				"io.kubernetes.cri.container-type":    "container",
				"io.kubernetes.cri.sandbox-id":        strings.Repeat("e", 64),
				"io.kubernetes.cri.sandbox-name":      c.pod,
				"io.kubernetes.cri.sandbox-namespace": c.ns,
				"io.kubernetes.cri.sandbox-uid":       c.uid,
				"io.kubernetes.cri.container-name":    c.ctrName,
			}
		case 1:
			c.levels = []string{"kubepods", "besteffort", "pod" + c.uid, "crio-" + c.id}
			c.bundle = map[string]string{
				"io.kubernetes.cri-o.ContainerType": "container",
				"io.kubernetes.pod.name":            c.pod,
				"io.kubernetes.pod.namespace":       c.ns,
				"io.kubernetes.pod.uid":             c.uid,
				"io.kubernetes.container.name":      c.ctrName,
			}
		case 2:
			// A Guaranteed pod, cgroupfs: /kubepods/pod<UID>/<ID>; its
			// bundle names a pod whose UID is not the path's.
			_, otherUID := ids(100)
			c.levels = []string{"kubepods", "pod" + c.uid, c.id}
			c.bundle = map[string]string{
				"io.kubernetes.cri.sandbox-name":      "impostor-" + tag,
				"io.kubernetes.cri.sandbox-namespace": "elsewhere",
				"io.kubernetes.cri.sandbox-uid":       otherUID,
				"io.kubernetes.cri.container-name":    "main",
			}
		case 3:
			c.levels = []string{"kubepods.slice", "kubepods-besteffort.slice", "kubepods-besteffort-pod" + us + ".slice", "crio-" + c.id + ".scope"}
		}
		if c.bundle != nil {
			d := filepath.Join(containerdDir, c.id)
			if c.crio {
				d = filepath.Join(crioDir, c.id, "userdata")
			}
			b, err := json.Marshal(map[string]any{"ociVersion": "1.2.0", "process": map[string]any{"args": []string{"/bin/longrun"}}, "annotations": c.bundle})
			require.NoError(t, err)
			require.NoError(t, os.MkdirAll(d, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(d, "config.json"), b, 0o644))
		}
		c.cgPath = "/" + strings.Join(c.levels, "/")
		c.dir = filepath.Join(root, c.cgPath)
		require.NoError(t, os.MkdirAll(c.dir, 0o755))
		cs = append(cs, &c)
	}
	t.Cleanup(func() {
		// Bottom up, each level once empty (the longruns are killed by
		// then: cleanups run in reverse order). The container's and the
		// pod's levels are waited for; the levels above are shared with
		// the other containers (and tests): removed when empty.
		for _, c := range cs {
			for i := len(c.levels); i > 0; i-- {
				d := filepath.Join(root, filepath.Join(c.levels[:i]...))
				for range 100 {
					if err := os.Remove(d); err == nil || os.IsNotExist(err) || i < len(c.levels)-1 {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
	})

	for _, c := range cs {
		cmd := exec.Command("bash", "-c", `echo $$ > "$1/cgroup.procs" && exec -a "$2" "$3"`, "_", c.dir, c.name, probetest.Bin(t, "longrun"))
		c.lr = startLongrunCmd(t, cmd)
	}
	addr := freeLoopback(t)
	stderr, stop := startDaemon(t, nil, "vramprof: serving http://"+addr, "serve", "--listen", addr,
		"--runtime-dirs", containerdDir+","+crioDir)
	for _, c := range cs {
		require.NoError(t, c.lr.cmd.Process.Signal(syscall.SIGUSR1))
	}
	for _, c := range cs {
		c.lr.expect(t, "done")
		c.truth = probetest.MustReadTruth(t, c.lr.truth)
	}

	for _, c := range cs {
		want := map[string]string{"command": c.name, "cgroup": c.cgPath, "container": c.id, "pod_uid": c.uid,
			"pod": c.pod, "namespace": c.ns, "container_name": c.ctrName}
		var fams famSets
		deadline := time.Now().Add(20 * time.Second)
		for {
			fams = fleetFamilies(scrapeMetrics(t, "http://"+addr), map[string]string{"command": c.name})
			if fams.sum(exporter.MetricFrees) == float64(c.truth.Totals.Frees) {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s: no series with longrun's %d frees: %v", c.name, c.truth.Totals.Frees, fams)
			time.Sleep(100 * time.Millisecond)
		}
		// Every series of the container carries exactly the labels the
		// test wrote (the group's; the device's besides).
		running := fams[exporter.MetricRunningProcesses]
		require.NotNil(t, running, c.name)
		require.Len(t, running.series, 1, "%s: one group", c.name)
		assert.Equal(t, want, running.series[0], c.name)
		t.Logf("%s: %s %v", c.name, exporter.MetricRunningProcesses, running.series[0])
		for name, f := range fams {
			for _, l := range f.series {
				for k, v := range want {
					assert.Equal(t, v, l[k], "%s: %s's %s", c.name, name, k)
				}
			}
		}
		for metric, v := range map[string]uint64{
			exporter.MetricAllocations:      c.truth.Totals.Allocations,
			exporter.MetricAllocatedBytes:   c.truth.Totals.AllocatedBytes,
			exporter.MetricLiveBytes:        c.truth.Totals.LiveBytesAtEnd,
			exporter.MetricRunningProcesses: 1,
		} {
			assert.Equal(t, float64(v), fams.sum(metric), "%s: %s", c.name, metric)
		}
	}
	// The mismatch is said, once; a missing bundle is not (the directories
	// are there: another runtime's container, or one gone).
	mismatch := cs[2]
	notes := strings.Count(stderr.String(), "container "+mismatch.id[:13]+": ")
	assert.Equal(t, 1, notes, "one note for the mismatched bundle:\n%s", stderr.String())
	assert.Contains(t, stderr.String(), fmt.Sprintf("not the cgroup path's %q", mismatch.uid))
	assert.NotContains(t, stderr.String(), cs[3].id[:13], "no note for a missing bundle")
	assert.True(t, slices.ContainsFunc(strings.Split(stderr.String(), "\n"), func(l string) bool {
		return strings.HasPrefix(l, "vramprof: container "+mismatch.id[:13]+": ") && strings.HasSuffix(l, "its series have no pod, namespace or container_name")
	}), "the note is one line:\n%s", stderr.String())

	for _, c := range cs {
		require.NoError(t, c.lr.cmd.Process.Signal(syscall.SIGTERM))
		<-c.lr.exit
	}
	stop()
}
