package exporter

import (
	"encoding/json"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	testPodUID = "0d3c6a3e-8a7b-4c1f-9e2d-5b6a7c8d9e0f"
	testCtrID  = "3f4e1b2a9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
	// testCgroup is testCtrID's cgroup with the systemd driver.
	testCgroup = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0d3c6a3e_8a7b_4c1f_9e2d_5b6a7c8d9e0f.slice/cri-containerd-" + testCtrID + ".scope"
)

// bundleJSON is an OCI runtime config whose annotations are a (and a
// field before them, as a real config.json has).
func bundleJSON(t *testing.T, a map[string]string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"ociVersion": "1.2.0", "process": map[string]any{"args": []string{"python3"}}, "annotations": a})
	require.NoError(t, err)
	return b
}

// containerdAnnotations are what containerd's CRI plugin puts on a
// container's spec.
func containerdAnnotations(pod, ns, uid, name string) map[string]string {
	return map[string]string{
		"io.kubernetes.cri.container-type":    "container",
		"io.kubernetes.cri.sandbox-id":        strings.Repeat("b", 64),
		"io.kubernetes.cri.sandbox-name":      pod,
		"io.kubernetes.cri.sandbox-namespace": ns,
		"io.kubernetes.cri.sandbox-uid":       uid,
		"io.kubernetes.cri.container-name":    name,
		"io.kubernetes.cri.image-name":        "registry.example.com/trainer:1",
	}
}

// crioAnnotations are what CRI-O puts on a container's spec (the
// kubelet's container labels among them).
func crioAnnotations(pod, ns, uid, name string) map[string]string {
	return map[string]string{
		"io.kubernetes.cri-o.ContainerType": "container",
		"io.kubernetes.cri-o.SandboxName":   "k8s_" + pod + "_" + ns + "_" + uid + "_0",
		"io.kubernetes.pod.name":            pod,
		"io.kubernetes.pod.namespace":       ns,
		"io.kubernetes.pod.uid":             uid,
		"io.kubernetes.container.name":      name,
	}
}

func TestPodFromBundle(t *testing.T) {
	const other = "99999999-8888-7777-6666-555555555555"
	for _, tc := range []struct {
		name string
		b    []byte
		want podMeta
		err  string // in the error; "" for none
	}{
		{"containerd", bundleJSON(t, containerdAnnotations("trainer-0", "ml", testPodUID, "main")), podMeta{"trainer-0", "ml", "main"}, ""},
		{"cri-o", bundleJSON(t, crioAnnotations("trainer-1", "ml-dev", testPodUID, "worker")), podMeta{"trainer-1", "ml-dev", "worker"}, ""},
		{"containerd, another pod's UID", bundleJSON(t, containerdAnnotations("trainer-0", "ml", other, "main")), podMeta{}, `pod UID "` + other + `", not the cgroup path's`},
		{"cri-o, another pod's UID", bundleJSON(t, crioAnnotations("trainer-1", "ml", other, "main")), podMeta{}, `pod UID "` + other + `"`},
		{"UID with underscores", bundleJSON(t, containerdAnnotations("trainer-0", "ml", strings.ReplaceAll(testPodUID, "-", "_"), "main")), podMeta{}, "not the cgroup path's"},
		{"no UID", bundleJSON(t, map[string]string{"io.kubernetes.cri.sandbox-name": "trainer-0", "io.kubernetes.cri.sandbox-namespace": "ml"}), podMeta{}, "no pod UID annotation"},
		{"no annotations", []byte(`{"ociVersion":"1.2.0"}`), podMeta{}, "no pod UID annotation"},
		{"no namespace", bundleJSON(t, containerdAnnotations("trainer-0", "", testPodUID, "main")), podMeta{}, "no pod name or namespace"},
		{"truncated", bundleJSON(t, containerdAnnotations("trainer-0", "ml", testPodUID, "main"))[:40], podMeta{}, "not an OCI runtime config: unexpected end of JSON input"},
		{"empty", nil, podMeta{}, "not an OCI runtime config"},
		{"not an object", []byte(`[1, 2]`), podMeta{}, "not an OCI runtime config"},
		{"annotations not strings", []byte(`{"annotations": {"io.kubernetes.cri.sandbox-uid": 7}}`), podMeta{}, "not an OCI runtime config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := podFromBundle(tc.b, testPodUID)
			assert.Equal(t, tc.want, got)
			if tc.err == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
			assert.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

// writeBundle writes a container's config.json under dir, as containerd
// lays it out (dir/ID/config.json) or CRI-O (dir/ID/userdata/config.json).
func writeBundle(t *testing.T, dir, id string, crio bool, b []byte) {
	t.Helper()
	d := filepath.Join(dir, id)
	if crio {
		d = filepath.Join(d, "userdata")
	}
	require.NoError(t, os.MkdirAll(d, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(d, "config.json"), b, 0o644))
}

// TestPodLabels: a Kubernetes container's series carry its pod's name,
// namespace and container name from its bundle, under either runtime's
// layout; read once per container (a change to the bundle is not seen
// while a process of the container is held), again once they all left.
// A malformed bundle gives no pod label and one note, however many of its
// processes come; processes outside a pod read nothing.
func TestPodLabels(t *testing.T) {
	const crioID = "7a6b5c4d3e2f3f4e1b2a9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f"
	const badID = "1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f3f4e1b2a9c8d7e6f5a4b3c2d"
	containerd, crio := t.TempDir(), t.TempDir()
	writeBundle(t, containerd, testCtrID, false, bundleJSON(t, containerdAnnotations("trainer-0", "ml", testPodUID, "main")))
	writeBundle(t, crio, crioID, true, bundleJSON(t, crioAnnotations("eval-7", "ml-dev", testPodUID, "sidecar")))
	writeBundle(t, containerd, badID, false, []byte(`{"annotations": {`))

	c := &clock{t: time.Unix(1000, 0)}
	running := map[uint32]bool{}
	var notes []string
	x := New(Options{Now: c.now, Grace: time.Second, TTL: time.Minute, RuntimeDirs: []string{containerd, crio},
		Alive: func(pid uint32, _ uint64) bool { return running[pid] },
		Note:  func(s string) { notes = append(notes, s) }})
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	start := func(pid uint32, cg string) {
		t.Helper()
		running[pid] = true
		feedCgroup(t, x, pid, cg, 1)
	}
	labelsOfGroup := func(cg string) map[string]string {
		t.Helper()
		f := scrape(t, srv.URL)[MetricRunningProcesses]
		require.NotNil(t, f)
		for _, m := range f.Metric {
			if l := labelsOf(m); l["cgroup"] == cg {
				return l
			}
		}
		t.Fatalf("no series of cgroup %s", cg)
		return nil
	}
	crioCg := "/kubepods/burstable/pod" + testPodUID + "/crio-" + crioID
	badCg := "/kubepods/pod" + testPodUID + "/" + badID
	start(101, testCgroup)
	start(102, crioCg)
	start(103, badCg)
	start(104, "/system.slice/train.service")
	l := labelsOfGroup(testCgroup)
	assert.Equal(t, map[string]string{"command": "trainer", "cgroup": testCgroup, "container": testCtrID, "pod_uid": testPodUID,
		"pod": "trainer-0", "namespace": "ml", "container_name": "main"}, l)
	l = labelsOfGroup(crioCg)
	assert.Equal(t, []string{"eval-7", "ml-dev", "sidecar", crioID, testPodUID}, []string{l["pod"], l["namespace"], l["container_name"], l["container"], l["pod_uid"]})
	l = labelsOfGroup(badCg)
	assert.Equal(t, []string{"", "", "", badID, testPodUID}, []string{l["pod"], l["namespace"], l["container_name"], l["container"], l["pod_uid"]})
	l = labelsOfGroup("/system.slice/train.service")
	assert.Equal(t, []string{"", "", "", "", ""}, []string{l["pod"], l["namespace"], l["container_name"], l["container"], l["pod_uid"]})

	// Another process of the malformed bundle's container: no new note.
	start(105, badCg)
	require.Len(t, notes, 1, "one note for the malformed bundle: %q", notes)
	assert.Contains(t, notes[0], "container 1e0f9a8b7c6d5: "+filepath.Join(containerd, badID, "config.json")+": not an OCI runtime config: unexpected end of JSON input")
	assert.ElementsMatch(t, []string{testCtrID, crioID, badID}, slices.Collect(maps.Keys(x.pods.byID)), "read once each")

	// The pod's bundle changes under a held process: not read again.
	writeBundle(t, containerd, testCtrID, false, bundleJSON(t, containerdAnnotations("trainer-renamed", "ml", testPodUID, "main")))
	start(106, testCgroup)
	assert.Equal(t, "trainer-0", labelsOfGroup(testCgroup)["pod"])
	assert.Equal(t, float64(2), mustGroupValue(t, scrape(t, srv.URL), MetricRunningProcesses, "pod", "trainer-0"))

	// Its processes leave (exit, scraped, past the grace period): the
	// container is forgotten, and a later process reads the bundle anew.
	running[101], running[106] = false, false
	x.Sweep()
	_ = scrape(t, srv.URL)
	c.t = c.t.Add(2 * time.Second)
	x.Sweep()
	assert.ElementsMatch(t, []string{crioID, badID}, slices.Collect(maps.Keys(x.pods.byID)), "the left container forgotten")
	start(107, testCgroup)
	assert.Equal(t, float64(1), mustGroupValue(t, scrape(t, srv.URL), MetricRunningProcesses, "pod", "trainer-renamed"))
	assert.Len(t, notes, 1)
}

// TestPodLabelsNoRuntimeDir: without the runtime directories (serve run
// without them mounted) a pod's series keep pod_uid, have no pod label,
// and one note says why and what to do.
func TestPodLabelsNoRuntimeDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "run", "containerd")
	var notes []string
	x := New(Options{RuntimeDirs: []string{missing}, Alive: func(uint32, uint64) bool { return true },
		Note: func(s string) { notes = append(notes, s) }})
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	feedCgroup(t, x, 101, testCgroup, 1)
	feedCgroup(t, x, 102, strings.ReplaceAll(testCgroup, "3f4e", "4f4e"), 1)
	v, ok := groupValue(scrape(t, srv.URL), MetricRunningProcesses, "pod_uid", testPodUID, "pod", "", "namespace", "")
	require.True(t, ok)
	assert.Equal(t, float64(2), v)
	require.Len(t, notes, 1, "%q", notes)
	assert.Contains(t, notes[0], "no container runtime directory ("+missing+")")
	assert.Contains(t, notes[0], "mount them read-only")
}

// mustGroupValue is groupValue, required to find a series.
func mustGroupValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	v, ok := groupValue(fams, name, labels...)
	require.True(t, ok, "%s%v", name, labels)
	return v
}
